"""servelab.model.providers with the real onnxruntime of this machine: GPU provider lists load CUDA's libraries
first, TensorRT is checked before its cache folder is made, and whether a provider can run is decided by a
session that ran."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from servelab.model import providers
from servelab.model.providers import EngineError, ort_providers, provider_check, tensorrt_library


@pytest.fixture
def preload_calls(monkeypatch):
    """Records calls of onnxruntime.preload_dlls (the real one may load CUDA libraries a test cannot undo)."""
    calls = []
    monkeypatch.setattr(ort, "preload_dlls", lambda *a, **k: calls.append((a, k)), raising=False)
    providers.preload_gpu_libraries.cache_clear()
    yield calls
    providers.preload_gpu_libraries.cache_clear()


@pytest.fixture
def fresh_checks():
    provider_check.cache_clear()
    yield
    provider_check.cache_clear()


def test_gpu_provider_lists_load_cuda_libraries_before_any_session(preload_calls):
    """Every session on a GPU provider is built from ort_providers' list, so loading the libraries there means
    `SERVELAB_PROVIDER=cuda servelab serve` no longer needs CUDA torch imported first."""
    assert ort_providers("cuda")[0][0] == "CUDAExecutionProvider"
    assert len(preload_calls) == 1


def test_cpu_provider_list_loads_no_cuda_libraries(preload_calls):
    assert ort_providers("cpu") == ["CPUExecutionProvider"]
    assert preload_calls == []


def test_onnxruntime_without_preload_dlls_is_fine(monkeypatch):
    """Releases before 1.21 have no preload_dlls: the list is still given."""
    monkeypatch.delattr(ort, "preload_dlls", raising=False)
    providers.preload_gpu_libraries.cache_clear()
    assert ort_providers("cuda")[-1] == "CPUExecutionProvider"


def test_unknown_provider_is_refused():
    with pytest.raises(EngineError, match="unknown provider 'rocm'"):
        ort_providers("rocm")


@pytest.mark.skipif(tensorrt_library() is not None, reason="TensorRT is installed on this machine")
def test_tensorrt_missing_is_said_before_the_cache_folder_is_touched(tmp_path):
    """Without TensorRT the answer is 'no TensorRT in this image', whatever the cache path: an unwritable one
    (here a path below a regular file, which even root cannot create) gave an OSError from mkdir before."""
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    with pytest.raises(EngineError, match="no TensorRT in this image"):
        ort_providers("tensorrt", cache_dir=blocker / "trt_cache", model_sha256="0" * 64)
    writable = tmp_path / "trt_cache"
    with pytest.raises(EngineError, match="no TensorRT in this image"):
        ort_providers("tensorrt", cache_dir=writable, model_sha256="0" * 64)
    assert not writable.exists()


def test_tiny_check_model_is_an_identity_matmul():
    """TINY_MODEL is stored as bytes; this rebuilds what it claims to be."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load_from_string(providers.TINY_MODEL)
    onnx.checker.check_model(model)
    assert [n.op_type for n in model.graph.node] == ["MatMul"]
    assert np.array_equal(numpy_helper.to_array(model.graph.initializer[0]), np.eye(4, dtype=np.float32))


def test_cpu_provider_check_runs_a_session(fresh_checks):
    assert provider_check("cpu") == providers.ProviderCheck("cpu", True, "")


def test_a_provider_the_build_lists_but_cannot_run_is_not_usable(monkeypatch, fresh_checks):
    """onnxruntime-gpu lists CUDA on a box with no usable GPU; here the real CPU build is made to list it the
    same way. The check asks a real session, which runs on the CPU, so CUDA is not usable, with the reason."""
    real = ort.get_available_providers()
    monkeypatch.setattr(ort, "get_available_providers", lambda: ["CUDAExecutionProvider", *real])
    check = provider_check("cuda")
    assert not check.usable
    assert "CPUExecutionProvider, not CUDAExecutionProvider" in check.reason


@pytest.mark.skipif(tensorrt_library() is not None, reason="TensorRT is installed on this machine")
def test_tensorrt_check_gives_the_missing_runtime_as_reason(fresh_checks):
    check = provider_check("tensorrt")
    assert not check.usable and "no TensorRT in this image" in check.reason


def test_tensorrt_options_key_the_engine_cache_by_model_and_touch_nothing(tmp_path):
    sha = "0123456789abcdef" * 4
    opts = providers.tensorrt_options(tmp_path / "cache", sha)
    assert opts["trt_engine_cache_path"] == str(tmp_path / "cache" / sha[:16])
    assert opts["trt_timing_cache_path"] == str(tmp_path / "cache") and opts["trt_force_sequential_engine_build"]
    assert providers.tensorrt_options(tmp_path / "cache", "f" * 64)["trt_engine_cache_path"] != opts["trt_engine_cache_path"]
    assert not (tmp_path / "cache").exists()
