"""Notebooks 04 and 05a put the serving moves in the student's hands: a config.pbtxt edited as text and loaded
with a plain repository-API request, NVIDIA's perf_analyzer beside servelab's measurement, Triton's trace drawn
as executions, and ONNX Runtime's session options changed by hand and measured (VNNI checked first)."""

from __future__ import annotations

import pytest

from servelab.lab import notebooks as nbs

pytestmark = pytest.mark.notebooks


def lesson(name: str) -> str:
    return next(p for p in nbs.discover() if p.stem.startswith(name)).read_text()


def test_04_loads_the_students_edit_with_a_plain_repository_api_request():
    text = lesson("04_")
    assert 'config_path.read_text()' in text and "my_edit" in text
    assert "client.load_model(lab.triton_model, config=my_json, headers=lab.triton_headers)" in text, "tritonclient's own call, not a servelab helper"
    assert "client.load_model(lab.triton_model, config=own_json, headers=lab.triton_headers)" in text, "the file's own config loaded back the same way"
    assert "/v2/repository/models/" in text, "the HTTP request it stands for is on screen"


def test_04_shows_perf_analyzer_and_the_trace_beside_its_own_numbers():
    text = lesson("04_")
    assert "pa.command(" in text and "pa.run(" in text and '"perf_analyzer"' in text
    assert "show_code(trace.tracing)" in text and "by_hand.traced(" in text and "trace.plot_timeline(" in text
    assert "plot_batch_histogram(" in text, "the /stats histogram beside the timeline"
    assert "batch_gain_by_engine" in text, "what a batch saved each engine, read from the run"


def test_05a_changes_session_options_by_hand_after_checking_for_vnni():
    text = lesson("05a_")
    assert "show_code(ort_profile" in text
    assert "ort.SessionOptions()" in text and "so.graph_optimization_level = level" in text
    assert "so.intra_op_num_threads = threads" in text and "ORT_DISABLE_ALL" in text
    # the CPU's VNNI flags (read from /proc/cpuinfo by servelab.lab.ort_options) before int8 is measured
    assert text.index("vnni = vnni_flags()") < text.index('meta["int8"]["path"]'), "the flag is read before int8 is measured"
