"""servelab.model.engines on a GPU node, checked offline: the provider options it hands to onnxruntime-gpu, and
the refusal of a session that silently fell back to another provider (onnxruntime-gpu is not installed here,
so the fallback itself cannot be produced; the check that catches it is exercised with real provider lists)."""

from __future__ import annotations

import pytest

from servelab.model.engines import EngineError, check_active_provider, ort_providers


def test_session_that_fell_back_is_refused():
    for wanted, active in (("TensorrtExecutionProvider", ["CUDAExecutionProvider", "CPUExecutionProvider"]),
                           ("CUDAExecutionProvider", ["CPUExecutionProvider"]),
                           ("CUDAExecutionProvider", [])):
        with pytest.raises(EngineError, match=f"not {wanted}"):
            check_active_provider(wanted, active)
    check_active_provider("CUDAExecutionProvider", ["CUDAExecutionProvider", "CPUExecutionProvider"])


def test_cpu_session_passes_the_check(onnx_meta, settings):
    """The same check runs on every OrtEmbedder; on CPU the first active provider is the one asked for."""
    from servelab.model.engines import make_embedder

    emb = make_embedder(settings, engine="onnx", provider="cpu")
    assert emb.active_providers[0] == "CPUExecutionProvider"


def test_tensorrt_cache_is_keyed_by_the_model(tmp_path):
    """The options name one engine folder per export; building them touches nothing (a machine without TensorRT
    is told so before any folder is made: tests/unit/test_providers.py)."""
    from servelab.model.providers import tensorrt_options

    sha = "0123456789abcdef" * 4
    opts = tensorrt_options(cache_dir=tmp_path, model_sha256=sha)
    assert opts["trt_engine_cache_path"] == str(tmp_path / sha[:16]) and not (tmp_path / sha[:16]).exists()
    assert opts["trt_timing_cache_path"] == str(tmp_path)
    assert opts["trt_force_sequential_engine_build"] is True
    other = tensorrt_options(cache_dir=tmp_path, model_sha256="f" * 64)
    assert other["trt_engine_cache_path"] != opts["trt_engine_cache_path"]


def test_cuda_ep_uses_heuristic_cudnn_search():
    """EXHAUSTIVE (onnxruntime's default) re-benchmarks cuDNN per new batch shape on a live request."""
    cuda, cpu = ort_providers("cuda")
    assert cuda == ("CUDAExecutionProvider", {"cudnn_conv_algo_search": "HEURISTIC"}) and cpu == "CPUExecutionProvider"
