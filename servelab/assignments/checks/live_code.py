"""Checks that run a student's code against real servers: a hand-written Triton client call against the running
Triton, a python-backend `execute` staged as a model and loaded next to the encoder, and a FastAPI route served
by uvicorn on loopback. The answer passes when what it returns matches what servelab's own code gets.

    triton_client_call(embed_over_grpc, triton_http_url=url, triton_grpc_url=grpc_url, model=model, exercise="07.1")
    python_backend_execute(execute, triton_http_url=url, repository=repo, exercise="06a.3")
    fastapi_route(add_route, embed_images=client.embed_images, photo=photos[0], exercise="01.2")

Everything an answer stages or starts is removed or stopped afterwards (servelab.assignments.live).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from servelab.assignments.result import CheckResult, NotRunHere, reject, run_check
from servelab.model.contract import DTYPE, EMBED_DIM, OUTPUT_NAME, TRITON_DTYPE


def triton_client_call(answer, *, triton_http_url: str, model: str, triton_grpc_url: str | None = None, batch: int = 2,
                       exercise: str, step=None, strict: bool | None = None) -> CheckResult:
    """answer: fn(url, model, pixels) -> embeddings, written by hand with `tritonclient.http` (or, when
    `triton_grpc_url` is given, `tritonclient.grpc`): an InferenceServerClient for `url` (host:port, no scheme),
    an InferInput for `pixel_values` with its data set by set_data_from_numpy, an InferRequestedOutput for
    `embedding`, infer, as_numpy. The function gets the gRPC address when `triton_grpc_url` is given.

    Checked by running it against the running Triton with `batch` preprocessed images: the result must be a
    float32 array of shape (batch, 512) matching, row by row, what servelab's own Triton client gets (over
    HTTP) for the same tensor."""
    from servelab.bench.load.inputs import sample_tensor
    from servelab.client import InferenceClient
    from servelab.triton.control import address

    pixels = sample_tensor(batch, seed=7)
    host = address(triton_grpc_url or triton_http_url)
    with InferenceClient(mode="remote", backend="triton-http", url=triton_http_url, payload="tensor", model=model) as c:
        expected = np.asarray(c.embed_tensor(pixels), dtype=np.float32)

    def judge(value):
        cos = judge_embeddings(value, expected, what="the batch had {n} images",
                               differs="send the tensor as it is (no reshaping or transposing) and read the "
                                       "`embedding` output")
        return f"{batch} embeddings of {expected.shape[1]} values from {model}, matching servelab's client (min cosine {cos.min():.6f})"

    return run_check("triton_client_call", exercise, answer, (host, model, pixels), judge, step, strict)


def judge_embeddings(value, expected: np.ndarray, *, what: str, differs: str) -> np.ndarray:
    """Reject `value` unless it is a float32 array shaped like `expected` ([n, 512]) whose rows each match
    `expected`'s (cosine >= 0.999); returns the cosines. `what` says what was sent ("{n}" becomes the row
    count), `differs` how to fix a row that does not match."""
    if value is None:
        reject("the function returned None: return the `embedding` output as a numpy array")
    got = np.asarray(value)
    if got.shape != expected.shape:
        if got.shape == expected.shape[1:]:
            reject(f"got one vector of shape {got.shape}: return the output as Triton gives it, one row per image")
        reject(f"got shape {got.shape}; {what.format(n=expected.shape[0])} and each embedding has "
               f"{expected.shape[1]} values")
    if got.dtype != np.float32:
        reject(f"got dtype {got.dtype}: the model's output is FP32; as_numpy returns it as it is")
    cos = (got * expected).sum(1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(expected, axis=1) + 1e-12)
    if cos.min() < 0.999:
        reject(f"row {int(cos.argmin())} differs from the same image's embedding: {differs}")
    return cos


_ROWS = f"data_type: TYPE_{TRITON_DTYPE}, dims: [ {EMBED_DIM} ]"  # the encoder's output rows, in and out
# a template: .format(name=...) fills in the model's name
L2NORM_CONFIG = ('name: "{name}"\nbackend: "python"\nmax_batch_size: 8\n'
                 f'input [ {{{{ name: "{OUTPUT_NAME}", {_ROWS} }}}} ]\n'
                 f'output [ {{{{ name: "unit_embedding", {_ROWS} }}}} ]\n'
                 "dynamic_batching {{ max_queue_delay_microseconds: 200000 }}\n"
                 "instance_group [ {{ kind: KIND_CPU, count: 1 }} ]\n")


def python_backend_execute(answer, *, triton_http_url: str, repository, exercise: str, step=None,
                           strict: bool | None = None) -> CheckResult:
    """answer: the function `execute(self, requests)` of a python-backend TritonPythonModel that L2-normalises
    each request's `embedding` rows ([n, 512] FP32) into `unit_embedding`, returning one InferenceResponse per
    request, in order (the module gives it `np` and `pb_utils`).

    Checked by running it: the function's source becomes model.py of a model staged in `repository` next to the
    lab's models (config: max_batch_size 8, dynamic batching with a 200 ms queue delay), Triton loads it, six
    concurrent requests of 1–3 rows each arrive together (so `execute` gets several requests at once), and each
    response must hold its own request's rows, normalised. The model is unloaded and removed afterwards."""
    from servelab.assignments.live import NotApplied, model_py, python_model
    from servelab.triton.control import address

    name = "exercise_" + re.sub(r"\W", "_", str(exercise)) + "_l2norm"

    def source():
        text = model_py(answer)
        if re.search(r"raise NotImplementedError\(\s*[\"']exercise", text):  # the student stub: nothing to stage yet
            raise NotImplementedError(f"exercise {exercise}: execute still raises NotImplementedError")
        return text

    def judge(text):
        import tritonclient.http as httpclient
        from tritonclient.utils import InferenceServerException

        if not repository or not Path(repository).is_dir():
            raise NotRunHere(f"the running Triton's model repository ({repository or 'not given'}) is not a folder "
                             "on this machine (a remote node): run this exercise against the local stack")

        rng = np.random.default_rng(3)
        batches = [rng.normal(size=(1 + i % 3, EMBED_DIM)).astype(DTYPE) for i in range(6)]
        host = address(triton_http_url)
        try:
            with python_model(repository, triton_http_url, name, L2NORM_CONFIG.format(name=name), text):
                client = httpclient.InferenceServerClient(host, concurrency=len(batches), network_timeout=60)
                pending = []
                for x in batches:
                    inp = httpclient.InferInput("embedding", list(x.shape), "FP32")
                    inp.set_data_from_numpy(x)
                    pending.append(client.async_infer(name, [inp], outputs=[httpclient.InferRequestedOutput("unit_embedding")]))
                outs, failures = [], []
                for p in pending:
                    try:
                        outs.append(p.get_result().as_numpy("unit_embedding"))
                    except InferenceServerException as exc:
                        outs.append(None)
                        failures.append(str(exc))
                client.close()
        except NotApplied as exc:
            reject(f"Triton could not load a model with your execute: {exc}")
        if any("NotImplementedError" in f for f in failures):
            raise NotImplementedError(f"exercise {exercise}: execute still raises NotImplementedError")
        if failures:
            first = failures[0].splitlines()[0][:300]
            if "response" in first.lower() and ("count" in first.lower() or "number" in first.lower()):
                reject(f"Triton got the wrong number of responses ({first}): return one response per request")
            reject(f"{len(failures)} of {len(batches)} requests failed: {first}")
        for i, (x, y) in enumerate(zip(batches, outs, strict=True)):
            if y is None or y.shape != x.shape:
                reject(f"request {i} sent {x.shape[0]} row(s) and got back shape {None if y is None else y.shape}: "
                       f"each response must carry its own request's rows")
            want = x / np.linalg.norm(x, axis=1, keepdims=True)
            if not np.allclose(y, want, atol=1e-4):
                if np.allclose(np.linalg.norm(y, axis=1), 1, atol=1e-3):
                    reject(f"request {i} got unit vectors, but not its own rows normalised: keep requests and responses in order")
                reject(f"request {i}: the rows are not the input divided by its L2 norm (norm per row, not per tensor)")
        return f"Triton ran your execute: {len(batches)} concurrent requests, each answered with its own rows normalised"

    return run_check("python_backend_execute", exercise, source, (), judge, step, strict)


def fastapi_route(answer, *, embed_images, photo: bytes, exercise: str, step=None, strict: bool | None = None) -> CheckResult:
    """answer: fn(app, embed_images) that adds `POST /embed-one` to the FastAPI `app`: the request body is one
    image's bytes (Content-Type image/jpeg or image/png); the reply is JSON {"embedding": [512 floats],
    "dim": 512}; a body that is not an image gets a 4xx with a JSON body saying what is wrong, never a 500.
    `embed_images(list_of_bytes)` returns an [n, 512] array (and raises on bytes that are not an image).

    Checked by running it: the app is served by uvicorn on a free loopback port and called over HTTP with a
    JPEG, with bytes that are not an image, and with an empty body."""
    import httpx
    from fastapi import FastAPI

    from servelab.assignments.live import NotApplied, served_app

    app = FastAPI()
    expected = np.asarray(embed_images([photo]))[0]

    def judge(_):
        def post(http, body: bytes):
            try:
                return http.post("/embed-one", content=body, headers={"content-type": "image/jpeg"})
            except httpx.TransportError as exc:  # the app crashed before answering: as bad as a 500
                return httpx.Response(599, text=f"no response: {type(exc).__name__}")

        try:
            with served_app(app) as base, httpx.Client(base_url=base, timeout=60) as http:
                ok, bad, empty = post(http, photo), post(http, b"these bytes are not an image"), post(http, b"")
        except NotApplied as exc:
            reject(str(exc))
        if ok.status_code in (404, 405):
            reject(f"POST /embed-one answered {ok.status_code}: register the route with @app.post on that path")
        if ok.status_code != 200:
            reject(f"a valid JPEG got HTTP {ok.status_code}: {ok.text[:200]}")
        try:
            body = ok.json()
        except ValueError:
            reject("the reply to a valid JPEG is not JSON")
        vec = np.asarray(body.get("embedding") if isinstance(body, dict) else None, dtype=np.float64)
        if vec.shape != expected.shape:
            reject(f"`embedding` should be a list of {expected.shape[0]} numbers, got shape {vec.shape}")
        if isinstance(body, dict) and body.get("dim") != expected.shape[0]:
            reject("`dim` should give the embedding's length")
        cos = float(vec @ expected / (np.linalg.norm(vec) * np.linalg.norm(expected) + 1e-12))
        if cos < 0.999:
            reject("the embedding is not the image's: pass the request body's bytes to embed_images as they are")
        for what, r in (("bytes that are not an image", bad), ("an empty body", empty)):
            if r.status_code >= 500:
                reject(f"{what} made the route fail (HTTP {r.status_code}, a 5xx or no answer): catch the error and "
                       f"answer 4xx with JSON")
            if not 400 <= r.status_code < 500:
                reject(f"{what} got HTTP {r.status_code}: a bad upload is the client's fault (4xx)")
            try:
                r.json()
            except ValueError:
                reject(f"the reply to {what} is not JSON: say what is wrong in a JSON body")
        return (f"POST /embed-one served by uvicorn: 200 with the image's embedding (cosine {cos:.6f}), "
                f"{bad.status_code} for bytes that are not an image, {empty.status_code} for an empty body")

    return run_check("fastapi_route", exercise, answer, (app, embed_images), judge, step, strict)

