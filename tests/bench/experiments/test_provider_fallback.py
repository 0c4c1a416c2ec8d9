"""A plain ONNX Runtime session asked for CUDA on a machine without it: it runs on the CPU, says so only in a
warning, and its measured rate sits beside the emulated H100 device's rate from its profile, labelled as such."""

from __future__ import annotations

import numpy as np
import pytest

from servelab.bench.experiments.provider_fallback import PlainSession, device_record, provider_fallback
from servelab.bench.load.options import LoadOpts
from servelab.bench.results.records import Run
from servelab.model.device_profile import profile
from servelab.model.providers import provider_check


@pytest.fixture(scope="module")
def tiny_encoder() -> bytes:
    """[N, 3, 224, 224] -> [N, 512]: the encoder's contract, a mean and a product instead of a ViT."""
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((3, 512)).astype(np.float32), "w")
    axes = numpy_helper.from_array(np.array([2, 3], dtype=np.int64), "axes")
    graph = helper.make_graph(
        [helper.make_node("ReduceMean", ["pixel_values", "axes"], ["m"], keepdims=0),
         helper.make_node("MatMul", ["m", "w"], ["image_embeds"])], "tiny",
        [helper.make_tensor_value_info("pixel_values", TensorProto.FLOAT, ["n", 3, 224, 224])],
        [helper.make_tensor_value_info("image_embeds", TensorProto.FLOAT, ["n", 512])], [w, axes])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    return model.SerializeToString()


no_cuda = pytest.mark.skipif(provider_check("cuda").usable, reason="CUDA runs here: nothing falls back")


@no_cuda
def test_a_session_asked_for_cuda_runs_on_the_cpu_without_an_error(tiny_encoder):
    s = PlainSession(tiny_encoder, "cuda")
    assert s.active[0] == "CPUExecutionProvider" and s.provider == "cpu"
    import onnxruntime as ort

    if "CUDAExecutionProvider" not in ort.get_available_providers():  # a CPU build says so in a Python warning
        assert any("CUDAExecutionProvider" in w for w in s.warnings), s.warnings
    assert s.embed(np.zeros((2, 3, 224, 224), np.float32)).shape == (2, 512)


@no_cuda
def test_the_fallback_is_measured_and_set_beside_the_emulated_device(tmp_path, tiny_encoder):
    run = Run("fallback", root=tmp_path, weights="none")
    device = profile("vit-b32-h100")
    fb = provider_fallback(run, tiny_encoder, device=device, asked="cuda", batch=2, opts=LoadOpts.smoke())
    assert fb.fell_back and fb.measured["fallback"] is True and fb.measured["provider"] == "cpu"
    assert fb.measured["asked_provider"] == "cuda" and fb.measured["throughput_img_s"] > 0
    assert "CPUExecutionProvider" in fb.measured["note"]
    emu = fb.emulated
    assert emu["kind"] == "derived" and emu["measured"] is False and emu["emulated"] is True
    assert emu["provider"] == emu["weights"] == "emulated vit-b32-h100"
    assert "not a measurement" in emu["note"] and "nvidia-h100-80gb-hbm3" in emu["params"]["device_source"]
    assert emu["throughput_img_s"] == pytest.approx(2 / (device.fixed_ms + 2 * device.per_image_ms) * 1000, rel=1e-3)
    assert fb.cost == pytest.approx(emu["throughput_img_s"] / fb.measured["throughput_img_s"])
    assert {r["experiment"] for r in run.records} == {"provider-fallback"} and len(run.records) == 2


def test_the_device_record_is_at_real_time_scale(tmp_path):
    p = profile("flat")  # 168 ms per batch up to 4 images, at time scale 1
    rec = device_record(Run("d", root=tmp_path, weights="none"), p.with_devices(2), 4)
    assert rec["throughput_img_s"] == pytest.approx(2 * 4 / 0.168, rel=1e-3) and rec["latency_p50_ms"] == 168.0
    assert rec["params"]["time_scale"] == 1.0


def test_the_plain_session_has_the_options_a_plain_script_gets(tiny_encoder):
    """A lesson once measured a "plain" session with its threads set, beside the student's plain one with
    ONNX Runtime's default (0): the session measured is made as the lesson says a script makes it."""
    import onnxruntime as ort

    s = PlainSession(tiny_encoder, "cpu")
    plain = ort.InferenceSession(tiny_encoder, providers=["CPUExecutionProvider"]).get_session_options()
    got = s.session.get_session_options()
    assert (got.intra_op_num_threads, got.graph_optimization_level) == (plain.intra_op_num_threads,
                                                                         plain.graph_optimization_level)
    assert s.threads == plain.intra_op_num_threads
