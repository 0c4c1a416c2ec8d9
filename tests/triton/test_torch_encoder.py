"""The python-backend encoder running servelab's torch engine instead of the ONNX export (what a GPU machine with
CUDA torch and no onnxruntime-gpu serves): staged with engine torch, a real tritonserver answers with the same
embeddings as the torch engine in this process."""

from __future__ import annotations

import numpy as np
import pytest

from servelab.client.triton import TritonBackend
from servelab.model.engines import make_embedder
from servelab.model.export import parity_batch
from servelab.triton.repository import parse_config, stage
from servelab.triton.server import EmbeddedTriton

pytestmark = pytest.mark.triton

ENCODER = "openclip_vit_b32_cpu"


def test_staging_with_engine_torch_names_it_its_precision_and_where_servelab_is(onnx_meta, settings, tmp_path):
    stage("cpu", tmp_path / "models", settings=settings, engine="torch")
    params = parse_config(tmp_path / "models" / ENCODER / "config.pbtxt").parameters
    assert params["engine"].string_value == "torch" and params["precision"].string_value == settings.precision
    assert params["servelab_path"].string_value
    with pytest.raises(ValueError, match="engine onnx or torch"):
        stage("cpu", tmp_path / "other", settings=settings, engine="tensorrt")


def test_triton_serves_the_torch_engine_with_its_embeddings(onnx_meta, settings, tmp_path):
    stage("cpu", tmp_path / "models", instances=1, settings=settings, engine="torch")
    batch = parity_batch(2)
    want = make_embedder(settings, engine="torch", provider="cpu").embed(batch)
    with EmbeddedTriton(tmp_path / "models", log_path=tmp_path / "triton.log", startup_timeout=240) as srv:
        backend = TritonBackend("grpc", srv.grpc_url)
        try:
            got = backend.embed_tensor(batch)
        finally:
            backend.close()
    assert got.shape == (2, 512)
    assert np.abs(got - want).max() < 1e-4
