"""The checks that run a student's code against real servers: a Triton client call against a real embedded
tritonserver, a python-backend execute staged and loaded there, a FastAPI route served by a real uvicorn. Each
accepts a working answer and rejects plausible wrong ones, and leaves nothing staged."""

from __future__ import annotations

import numpy as np
import pytest
from fastapi import HTTPException, Request  # module level: routes' annotations are strings here (__future__)

from servelab.assignments import checks
from servelab.assignments.result import FAIL, NOT_IMPLEMENTED, PASS, STRICT_ENV
from servelab.triton.models import CPU_ENCODER

pytestmark = pytest.mark.triton

@pytest.fixture(autouse=True)
def _not_strict(monkeypatch):
    monkeypatch.delenv(STRICT_ENV, raising=False)


@pytest.fixture
def triton(assignments_triton):
    return assignments_triton


def client_call(url, model, pixels):
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(url)
    inp = httpclient.InferInput("pixel_values", list(pixels.shape), "FP32")
    inp.set_data_from_numpy(pixels, binary_data=True)
    out = httpclient.InferRequestedOutput("embedding", binary_data=True)
    return client.infer(model, [inp], outputs=[out]).as_numpy("embedding")


def test_triton_client_call(triton):
    kw = dict(triton_http_url=triton.http_url, model=CPU_ENCODER, exercise="t")
    assert checks.triton_client_call(client_call, **kw).status == PASS
    assert checks.triton_client_call(lambda u, m, p: client_call(u, m, p)[0], **kw).status == FAIL  # one vector
    r = checks.triton_client_call(lambda u, m, p: client_call(u, m, p[:, :, ::-1].copy()), **kw)  # flipped image
    assert r.status == FAIL and "differs" in r.message
    r = checks.triton_client_call(lambda u, m, p: client_call("http://" + u, m, p), **kw)  # scheme in the URL
    assert r.status == "error"


def execute(self, requests):
    responses = []
    for request in requests:
        x = pb_utils.get_input_tensor_by_name(request, "embedding").as_numpy()  # noqa: F821 (model.py has it)
        y = (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)
        responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("unit_embedding", y)]))  # noqa: F821
    return responses


def execute_one_response(self, requests):
    x = np.concatenate([pb_utils.get_input_tensor_by_name(r, "embedding").as_numpy() for r in requests])  # noqa: F821
    y = (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)
    return [pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("unit_embedding", y)])]  # noqa: F821


def execute_norm_per_tensor(self, requests):
    responses = []
    for request in requests:
        x = pb_utils.get_input_tensor_by_name(request, "embedding").as_numpy()  # noqa: F821
        y = (x / np.linalg.norm(x)).astype(np.float32)
        responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("unit_embedding", y)]))  # noqa: F821
    return responses


def execute_stub(self, requests):
    raise NotImplementedError("exercise t: write execute")


def test_python_backend_execute(triton):
    kw = dict(triton_http_url=triton.http_url, repository=triton.repository, exercise="t.py")
    r = checks.python_backend_execute(execute, **kw)
    assert r.status == PASS, r.message
    assert not (triton.repository / "exercise_t_py_l2norm").exists()  # staged, loaded, then removed
    assert checks.python_backend_execute(execute_one_response, **kw).status == FAIL
    r = checks.python_backend_execute(execute_norm_per_tensor, **kw)
    assert r.status == FAIL and "per row" in r.message
    assert checks.python_backend_execute(execute_stub, **kw).status == NOT_IMPLEMENTED


def add_route(app, embed_images):
    @app.post("/embed-one")
    async def embed_one(request: Request):
        body = await request.body()
        try:
            vec = embed_images([body])[0]
        except Exception as exc:
            raise HTTPException(status_code=400, detail=f"not an image: {exc}") from None
        return {"embedding": [float(v) for v in vec], "dim": len(vec)}


def add_route_500(app, embed_images):
    @app.post("/embed-one")
    async def embed_one(request: Request):
        return {"embedding": list(map(float, embed_images([await request.body()])[0])), "dim": 512}


def add_route_wrong_path(app, embed_images):
    @app.post("/embed")
    def embed_one():
        return {}


def test_fastapi_route(photos, onnx_meta):
    from servelab.client import InferenceClient

    with InferenceClient(mode="local") as local:
        kw = dict(embed_images=local.embed_images, photo=photos[0], exercise="t")
        r = checks.fastapi_route(add_route, **kw)
        assert r.status == PASS, r.message
        r = checks.fastapi_route(add_route_500, **kw)
        assert r.status == FAIL and "500" in r.message, r.message
        r = checks.fastapi_route(add_route_wrong_path, **kw)
        assert r.status == FAIL and "/embed-one" in r.message
