"""Notebooks 04 and 05a put the serving moves in the student's hands: a config.pbtxt edited as text and loaded
with a plain repository-API request, NVIDIA's perf_analyzer beside servelab's measurement, Triton's trace drawn
as executions, and ONNX Runtime's session options changed by hand and measured (VNNI checked first)."""

from __future__ import annotations

import pytest

from servelab.lab import notebooks as nbs

pytestmark = pytest.mark.notebooks


def lesson(name: str) -> str:
    return next(p for p in nbs.discover() if p.stem.startswith(name)).read_text()


def test_04_loads_the_students_edit_on_disk_with_a_plain_repository_api_request():
    text = lesson("04_")
    assert "show_code(by_hand.copy_model)" in text, "the copy of the encoder the student edits is made on screen"
    assert "def edit_config(path):" in text and "path.write_text(" in text, "the student edits the file on disk"
    assert ".load_model(model, headers=lab.triton_headers)" in text, "tritonclient's own call, written by the student"
    assert "/v2/repository/models/" in text, "the HTTP request it stands for is on screen"
    assert "my_edit" not in text, "no regex on a Python string in place of the file"


def test_04_runs_the_students_perf_analyzer_lines_and_the_trace_beside_its_own_numbers():
    text = lesson("04_")
    assert "def sweep_lines(" in text and "--concurrency-range" in text and "checks.perf_analyzer_sweep(" in text
    assert "by_hand.traced(" in text and "trace.plot_timeline(" in text
    assert "plot_batch_histogram(" in text, "the /stats histogram beside the timeline"
    assert "batch_gain_by_engine" in text, "what a batch saved each engine, read from the run"


def test_05a_changes_session_options_by_hand_after_checking_for_vnni():
    text = lesson("05a_")
    assert "show_code(ort_profile" in text
    assert "ort.SessionOptions()" in text and "so.graph_optimization_level = level" in text
    assert "so.intra_op_num_threads = threads" in text and "ORT_DISABLE_ALL" in text
    # the CPU's VNNI flags (read from /proc/cpuinfo by servelab.lab.ort_options) before int8 is measured
    assert text.index("vnni = vnni_flags()") < text.index('meta["int8"]["path"]'), "the flag is read before int8 is measured"
