"""Notebook 05a's sessions timed by hand: VNNI read from the CPU flags, ratios taken within rounds and read by the
verdict helpers, and a cosine printed so that its distance from 1 shows."""

from __future__ import annotations

import numpy as np
import pytest

from servelab.bench.report import Reading, ratio_reading
from servelab.lab.ort_options import cosine_text, option_rows, round_ratio, time_rounds, vnni_flags


def test_vnni_flags_are_read_from_the_cpu_flags(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu sse avx512f avx512_vnni avx_vnni\n\nprocessor\t: 1\n"
                    "flags\t\t: fpu sse avx512f avx512_vnni avx_vnni\n")
    assert vnni_flags(info) == ["avx512_vnni", "avx_vnni"]


def test_no_vnni_without_the_flag_or_the_file(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("flags\t\t: fpu sse avx2\n")
    assert vnni_flags(info) == []
    assert vnni_flags(tmp_path / "missing") == []


@pytest.mark.parametrize("cos, shown", [(0.99962, "0.999620 (1 − cos = 3.8e-04)"),
                                        (0.9999996, "1.000000 (1 − cos = 4.0e-07)"),
                                        (1.0, "1.000000 (1 − cos = 0.0e+00)")])
def test_cosine_text_shows_the_distance_from_one(cos, shown):
    assert cosine_text(cos) == shown


TIMES = {"fp32, ORT_ENABLE_ALL": [10.0, 12.0, 11.0, 10.0, 13.0],
         "fp32, ORT_DISABLE_ALL": [11.0, 10.0, 12.0, 9.0, 14.0],     # pairs on both sides of 1
         "int8, ORT_ENABLE_ALL": [5.0, 6.0, 5.5, 5.0, 6.5]}          # twice as fast in every round


def test_a_ratio_whose_rounds_fall_on_both_sides_of_one_is_indistinguishable():
    rec = round_ratio(TIMES, "fp32, ORT_ENABLE_ALL", "fp32, ORT_DISABLE_ALL", labels=("fused", "as exported"))
    assert (rec["a"], rec["b"], rec["repeats"]) == ("fused", "as exported", 5)
    assert rec["ratio_min"] < 1 < rec["ratio_max"]
    assert ratio_reading(rec).reading is Reading.TOO_CLOSE


def test_a_ratio_past_the_margin_in_every_round_is_ranked():
    rec = round_ratio(TIMES, "int8, ORT_ENABLE_ALL", "fp32, ORT_ENABLE_ALL")
    assert rec["ratio"] == pytest.approx(2.0)
    verdict = ratio_reading(rec)
    assert verdict.ranked and verdict.ahead == "a"


def test_option_rows_keep_the_cosine_unrounded():
    rng = np.random.default_rng(0)
    fp32 = rng.standard_normal((1, 512)).astype(np.float32)
    int8 = fp32 + 0.02 * rng.standard_normal((1, 512)).astype(np.float32)
    outputs = {"fp32, ORT_ENABLE_ALL": fp32, "fp32, ORT_DISABLE_ALL": fp32, "int8, ORT_ENABLE_ALL": int8}
    rows = {r["session"]: r for r in option_rows(TIMES, outputs, "fp32, ORT_ENABLE_ALL")}
    int8_row = rows["int8, ORT_ENABLE_ALL"]
    assert 0.999 < int8_row["cosine_vs_fp32"] < 1.0
    assert int8_row["one_minus_cosine"] == pytest.approx(1 - int8_row["cosine_vs_fp32"], rel=1e-2)
    assert int8_row["speed_vs_enable_all"] == pytest.approx(2.0)
    assert rows["fp32, ORT_ENABLE_ALL"]["speed_vs_enable_all"] == 1.0


def test_time_rounds_times_every_session_in_every_round():
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "relu",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    sessions = {name: ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
                for name in ("a", "b")}
    onnx.checker.check_model(model)
    times = time_rounds(sessions, np.ones((1, 4), np.float32), rounds=3, runs=2)
    assert list(times) == ["a", "b"]
    assert all(len(ms) == 3 and all(t > 0 for t in ms) for ms in times.values())
