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


@needs_torch_cuda
def test_the_torch_engine_assembles_its_batches_on_the_gpu(settings, photos):
    """uint8 pixels and float32 tensors copied from pinned host buffers without blocking, cast and normalised on the
    GPU, give the same embeddings; so does a batch padded into its bucket's CUDA graph."""
    from servelab.model.engines import TorchEmbedder
    from servelab.model.preprocess import decode_image, pixels_pil

    on = settings.with_(engine="torch", provider="cuda", precision="bf16", max_batch=8)
    eager, graphed = TorchEmbedder(on), TorchEmbedder(on.with_(cuda_graphs=True))
    assert eager.info()["host_buffers"].startswith("pinned") and graphed.info()["cuda_graphs"] == [1, 2, 4, 8]
    x = preprocess_batch(photos)
    pixels = np.stack([pixels_pil(decode_image(p, reduce_to=224)) for p in photos])
    ref = eager.embed_parts([x])[0]
    assert cosine(ref, eager.embed_parts([pixels])[0]).min() >= 0.999
    mixed = eager.embed_parts([x[:3], pixels[3:]])
    assert cosine(np.concatenate(mixed), ref).min() >= 0.999
    assert cosine(graphed.embed_parts([x[:3]])[0], ref[:3]).min() >= 0.999  # 3 rows in the graph of 4


@needs_torch_cuda
def test_the_service_decodes_jpegs_with_nvjpeg_on_the_gpu(settings, photos):
    """decode auto on torch/cuda: JPEG requests decoded by batched nvJPEG at cosine >= 0.999 to the CPU path, a PNG on
    the CPU path, a corrupt JPEG refused alone with a 400 naming it."""
    import io

    import httpx
    from PIL import Image

    from servelab.config import Settings
    from servelab.model.engines import make_embedder
    from tests.integration.test_service_device_decode import Served

    reference = make_embedder(settings, engine="torch", provider="cuda").embed(preprocess_batch(photos))
    on_gpu = Settings.from_env(engine="torch", provider="cuda", max_batch=8, warmup_iters=1, max_wait_ms=0)
    with Served(on_gpu) as srv:
        decode = srv.info()["decode"]
        assert decode["in_force"] == "device" and "nvJPEG" in decode["why"], decode
        files = [("file", (f"{i}.jpg", p, "image/jpeg")) for i, p in enumerate(photos)]
        r = httpx.post(srv.url + "/embed", files=files, timeout=120)
        assert r.status_code == 200, r.text
        assert cosine(np.asarray(r.json()["embeddings"], np.float32), reference).min() >= 0.999
        png = io.BytesIO()
        Image.open(io.BytesIO(photos[0])).save(png, format="PNG")
        assert srv.embed(png.getvalue(), {"Content-Type": "image/png"}).status_code == 200
        bad = srv.embed(photos[0][: len(photos[0]) // 3])
        assert bad.status_code == 400 and bad.json()["error"]["code"] == "corrupt", bad.text
        assert srv.info()["decode"]["images"] == {"device": len(photos) + 1, "cpu": 1}
