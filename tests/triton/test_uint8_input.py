"""The CPU Triton encoders' uint8 variants (`<encoder>_uint8`), staged and in a real tritonserver: the crop's pixels
sent as uint8 `pixels_uint8` (a quarter of the bytes) give the embeddings of the same pixels sent as float32
`pixel_values` to the encoder, through servelab's Triton client over HTTP and gRPC; a uint8 body of the wrong size
is refused with a message that names the sizes."""

from __future__ import annotations

import json

import httpx
import numpy as np
import pytest

from servelab.client.triton import TritonBackend, TritonInferenceError
from servelab.model.contract import INPUT_SHAPE, PIXEL_INPUT_NAME
from servelab.model.preprocess import decode_image, normalise, pixels_pil
from servelab.triton.models import CPU_ENCODER, EMULATED_ENCODER, uint8_model
from servelab.triton.repository import parse_config

pytestmark = pytest.mark.triton


@pytest.fixture(scope="module")
def pixels(jpegs) -> np.ndarray:
    """uint8 [4, 3, 224, 224]: the photos resized and cropped as the service does, not yet normalised."""
    return np.stack([pixels_pil(decode_image(j, reduce_to=224)) for j in jpegs])


@pytest.fixture(scope="module")
def staged(onnx_meta, settings, tmp_path_factory):
    """A repository of its own, as staging wrote it: the session's running Triton has its configs reloaded and
    rewritten by other tests (batching on and off, preferred sizes), the variants' not."""
    from servelab.triton.repository import stage

    out = tmp_path_factory.mktemp("uint8-staged") / "models"
    stage("cpu", out, instances=1, max_delay_us=5000, settings=settings, uint8=True)
    return out


@pytest.mark.parametrize("encoder", [CPU_ENCODER, EMULATED_ENCODER])
def test_each_cpu_encoder_is_staged_with_a_uint8_variant_of_the_same_settings(staged, encoder):
    from tritonclient.grpc import model_config_pb2 as mc

    triton_repo = staged

    base = parse_config(triton_repo / encoder / "config.pbtxt")
    variant = parse_config(triton_repo / uint8_model(encoder) / "config.pbtxt")
    assert [(i.name, mc.DataType.Name(i.data_type), list(i.dims)) for i in variant.input] == \
        [(PIXEL_INPUT_NAME, "TYPE_UINT8", list(INPUT_SHAPE))]
    for same in ("output", "max_batch_size", "dynamic_batching", "instance_group", "parameters"):
        assert getattr(variant, same) == getattr(base, same), same
    assert (triton_repo / uint8_model(encoder) / "1" / "model.py").read_text() == \
        (triton_repo / encoder / "1" / "model.py").read_text()
    if encoder == CPU_ENCODER:  # the export linked, not copied
        assert (triton_repo / uint8_model(encoder) / "1" / "model.onnx").stat().st_ino == \
            (triton_repo / encoder / "1" / "model.onnx").stat().st_ino


@pytest.mark.parametrize("protocol", ["http", "grpc"])
@pytest.mark.parametrize("model", [CPU_ENCODER, EMULATED_ENCODER])
def test_uint8_pixels_give_the_embeddings_of_the_same_pixels_as_float32(triton, pixels, model, protocol):
    url = triton.http_url if protocol == "http" else triton.grpc_url
    with TritonBackend(protocol, url, model=model) as client:
        assert client.pixel_model == uint8_model(model)
        from_float = client.embed_tensor(normalise(pixels))
        from_uint8 = client.embed_tensor(pixels)
        wrong = client.embed_tensor(pixels.astype(np.float32))  # pixels taken as if they were normalised
    assert from_uint8.shape == from_float.shape == (len(pixels), 512)
    np.testing.assert_allclose(from_uint8, from_float, rtol=0, atol=1e-5)
    cosine = (from_uint8 * from_float).sum(axis=1) / (np.linalg.norm(from_uint8, axis=1)
                                                      * np.linalg.norm(from_float, axis=1))
    assert cosine.min() >= 0.99999
    assert np.abs(wrong - from_float).max() > 1e-3  # the same numbers are not an accident of the input


def _binary_infer(url: str, model: str, name: str, datatype: str, shape: list[int], data: bytes) -> httpx.Response:
    """One request in Triton's binary tensor extension, written by hand: the JSON header declares the input's
    shape and byte count, the bytes follow it."""
    header = json.dumps({"inputs": [{"name": name, "datatype": datatype, "shape": shape,
                                     "parameters": {"binary_data_size": len(data)}}],
                         "outputs": [{"name": "embedding", "parameters": {"binary_data": True}}]}).encode()
    return httpx.post(f"{url}/v2/models/{model}/infer", content=header + data,
                      headers={"Inference-Header-Content-Length": str(len(header)),
                               "Content-Type": "application/octet-stream"}, timeout=30)


@pytest.mark.parametrize("model", [CPU_ENCODER, EMULATED_ENCODER])
def test_a_uint8_body_of_the_wrong_size_is_refused_with_the_sizes_named(triton, model):
    short = bytes(1000)  # declared [1, 3, 224, 224] uint8, that is 150,528 bytes
    r = _binary_infer(triton.http_url, uint8_model(model), PIXEL_INPUT_NAME, "UINT8", [1, *INPUT_SHAPE], short)
    assert r.status_code == 400
    message = r.json()["error"]
    assert PIXEL_INPUT_NAME in message and "150528" in message and "1000" in message, message
    with TritonBackend("http", triton.http_url, model=model) as client:
        with pytest.raises(TritonInferenceError, match=rf"unexpected shape for input '{PIXEL_INPUT_NAME}'"):
            client.embed_tensor(np.zeros((1, 3, 200, 200), np.uint8))  # a wrong shape, through the client
        assert client.embed_tensor(np.zeros((1, *INPUT_SHAPE), np.uint8)).shape == (1, 512)  # it still serves


def test_the_uint8_variants_are_staged_only_when_asked(onnx_meta, settings, tmp_path):
    """A Triton that loads every staged model would otherwise hold a second ONNX session no lesson sends to."""
    from servelab.triton.repository import stage

    stage("cpu", tmp_path / "models", instances=1, settings=settings)
    staged = {p.name for p in (tmp_path / "models").iterdir() if p.is_dir()}
    assert CPU_ENCODER in staged and not {uint8_model(CPU_ENCODER), uint8_model(EMULATED_ENCODER)} & staged
