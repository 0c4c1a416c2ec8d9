"""The calls a student makes by hand, run for real: one POST /embed/tensor to a real uvicorn service, one ONNX
Runtime session on the exported model."""

from __future__ import annotations

import pytest

from servelab.assignments import checks
from servelab.assignments.result import FAIL, NOT_IMPLEMENTED, PASS, STRICT_ENV
from servelab.model.preprocess import preprocess_bytes
from servelab.model.providers import ort_providers

TENSOR_HEADERS = {"Content-Type": "application/octet-stream", "X-Shape": "1,3,224,224", "X-Dtype": "float32"}


@pytest.fixture(autouse=True)
def _not_strict(monkeypatch):
    monkeypatch.delenv(STRICT_ENV, raising=False)


@pytest.fixture(scope="module")
def local():
    from servelab.client import InferenceClient

    with InferenceClient(mode="local") as client:
        yield client


def _by_hand(http, photo):
    tensor = preprocess_bytes(photo)[None].astype("<f4")
    reply = http.post("/embed/tensor", content=tensor.tobytes(), headers=TENSOR_HEADERS)
    return reply.json()["embeddings"][0]


def test_one_request_by_hand(service, photos, local):
    kw = dict(url=service.url, photo=photos[0], embed_images=local.embed_images, exercise="t")
    r = checks.hand_request(_by_hand, **kw)
    assert r.status == PASS and "POST /embed/tensor → 200 in" in r.message and "602,112 bytes" in r.message

    def no_shape(http, photo):
        reply = http.post("/embed/tensor", content=preprocess_bytes(photo).astype("<f4").tobytes(),
                          headers={"Content-Type": "application/octet-stream"})
        return reply.json().get("embeddings", [[0.0]])[0]

    r = checks.hand_request(no_shape, **kw)
    assert r.status == FAIL and "answered 4" in r.message and "X-Shape" in r.message

    def other_photo(http, photo):
        return _by_hand(http, photos[1])

    r = checks.hand_request(other_photo, **kw)
    assert r.status == FAIL and "not this photo's" in r.message

    r = checks.hand_request(lambda http, photo: local.embed_images([photo])[0], **kw)  # no request sent
    assert r.status == FAIL and "no POST /embed/tensor reached the service" in r.message

    def stub(http, photo):
        raise NotImplementedError("exercise t")

    assert checks.hand_request(stub, **kw).status == NOT_IMPLEMENTED


def test_the_session_made_by_hand(onnx_meta):
    import onnxruntime as ort

    path, providers = onnx_meta["path"], ort_providers("cuda")
    r = checks.ort_session(lambda p, pr: ort.InferenceSession(str(p), providers=pr), path=path, providers=providers,
                           exercise="t")
    assert r.status == PASS and "get_providers()" in r.message and "intra_op_num_threads 0" in r.message
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        assert "fell back" in r.message and "CUDAExecutionProvider" in r.message
    # a session that was not asked for the list: on a CPU build no warning about CUDA; on a GPU build the wrong providers
    r = checks.ort_session(lambda p, pr: ort.InferenceSession(str(p), providers=["CPUExecutionProvider"]), path=path,
                           providers=providers, exercise="t")
    assert r.status == FAIL and "providers=providers" in r.message
    r = checks.ort_session(lambda p, pr: str(p), path=path, providers=providers, exercise="t")
    assert r.status == FAIL and "InferenceSession itself" in r.message
    int8 = onnx_meta["int8"]["path"]
    r = checks.ort_session(lambda p, pr: ort.InferenceSession(str(int8), providers=pr), path=path, providers=providers,
                           exercise="t")
    assert r.status == FAIL and "not for the model at `path`" in r.message

    def stub(p, pr):
        raise NotImplementedError("exercise t")

    assert checks.ort_session(stub, path=path, providers=providers, exercise="t").status == NOT_IMPLEMENTED
