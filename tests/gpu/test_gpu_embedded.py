"""The embedded stack on a GPU (`pytest -m gpu`, on the GPU machine): every test here needs CUDA and is skipped
elsewhere with the reason the engine gave. What can be checked without a GPU lives in tests/unit
(test_providers, test_gpu_mode, test_engine_precision) and tests/triton/test_stage_device."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from servelab.model.preprocess import preprocess_batch
from servelab.model.providers import EngineError, ort_providers, provider_check, tensorrt_library, torch_cuda_check
from tests.conftest import cosine

ORT_CUDA, TORCH_CUDA = provider_check("cuda"), torch_cuda_check()
pytestmark = pytest.mark.gpu
needs_ort_cuda = pytest.mark.skipif(not ORT_CUDA.usable, reason=f"ONNX Runtime cannot run CUDA here: {ORT_CUDA.reason}")
needs_torch_cuda = pytest.mark.skipif(not TORCH_CUDA.usable, reason=f"torch cannot run CUDA here: {TORCH_CUDA.reason}")


@needs_ort_cuda
def test_a_cuda_session_needs_no_torch_imported_first():
    """onnxruntime-gpu's CUDA provider has no RUNPATH to pip's CUDA libraries; ort_providers preloads them."""
    code = ("import sys; from servelab.model.providers import provider_check; c = provider_check('cuda'); "
            "assert 'torch' not in sys.modules, 'torch was imported'; print(c.usable, c.reason)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split()[0] == "True", done.stdout + done.stderr


@needs_ort_cuda
@pytest.mark.parametrize("engine", ["onnx", "onnx-int8"])
def test_ort_cuda_engine_runs_on_cuda_and_matches_the_cpu(settings, photos, engine):
    from servelab.model.engines import make_embedder

    x = preprocess_batch(photos)
    gpu = make_embedder(settings, engine=engine, provider="cuda")
    assert gpu.active_providers[0] == "CUDAExecutionProvider"
    cpu = make_embedder(settings, engine=engine, provider="cpu")
    assert cosine(gpu.embed(x), cpu.embed(x)).min() >= (0.9999 if engine == "onnx" else 0.999)


@needs_torch_cuda
@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_torch_half_precision_on_cuda_matches_fp32(settings, photos, precision):
    from servelab.model.engines import make_embedder

    x = preprocess_batch(photos)
    fp32 = make_embedder(settings, engine="torch", provider="cuda", precision="fp32").embed(x)
    half = make_embedder(settings, engine="torch", provider="cuda", precision=precision).embed(x)
    assert cosine(fp32, half).min() >= 0.999


@needs_torch_cuda
def test_gpu_jpeg_decode_matches_the_cpu_path(settings, photos):
    """Batched nvJPEG decode + torch resize on the GPU against PIL + numpy, compared on embeddings."""
    import torch

    from servelab.model.engines import make_embedder
    from servelab.model.gpu_decode import preprocess_jpegs

    emb = make_embedder(settings, engine="torch", provider="cuda")
    on_gpu = preprocess_jpegs(photos, device="cuda")
    assert on_gpu.device.type == "cuda" and tuple(on_gpu.shape) == (len(photos), 3, 224, 224)
    with torch.inference_mode():
        from_gpu = emb.module(on_gpu).float().cpu().numpy()
    from_cpu = emb.embed(preprocess_batch(photos))
    assert cosine(from_gpu, from_cpu).min() >= 0.999


def test_tensorrt_answer_is_clear(tmp_path):
    """Without TensorRT: 'no TensorRT in this image'; with it, an unwritable cache is named, not a bare OSError."""
    if tensorrt_library() is None:
        with pytest.raises(EngineError, match="no TensorRT in this image"):
            ort_providers("tensorrt", cache_dir=tmp_path / "trt")
        return
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(EngineError, match="cannot be created"):
        ort_providers("tensorrt", cache_dir=blocker / "trt")


@needs_ort_cuda
def test_triton_python_backend_encoder_on_kind_gpu(settings, photos, tmp_path, onnx_meta):
    from servelab.client import InferenceClient
    from servelab.model.engines import make_embedder
    from servelab.triton.repository import stage
    from servelab.triton.server import EmbeddedTriton

    repo = stage("cpu", tmp_path / "models", device="cuda", max_batch=256, settings=settings)["repository"]
    x = preprocess_batch(photos)
    with EmbeddedTriton(repo, log_path=tmp_path / "tritonserver.log", startup_timeout=240) as srv:
        with InferenceClient(mode="remote", backend="triton-http", url=srv.http_url, payload="tensor") as client:
            out = client.embed_tensor(x)
        with InferenceClient(mode="remote", backend="triton-grpc", url=srv.grpc_url, payload="jpeg") as client:
            via_jpeg = client.embed_images(photos)  # the ensemble: CPU decode, then the GPU encoder
    expected = make_embedder(settings, engine="onnx", provider="cpu").embed(x)
    assert cosine(np.asarray(out), expected).min() >= 0.9999
    assert cosine(np.asarray(via_jpeg), expected).min() >= 0.9999
    assert "KIND_GPU" in (tmp_path / "models" / "openclip_vit_b32_cpu" / "config.pbtxt").read_text()
