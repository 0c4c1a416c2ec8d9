"""The FastAPI service, as a real uvicorn process on a free loopback port, through real HTTP."""

from __future__ import annotations

import base64
import concurrent.futures as cf
import io
import os

import httpx
import numpy as np
import pytest
from PIL import Image
from prometheus_client.parser import text_string_to_metric_families

from servelab.client import InferenceClient, InferenceError
from servelab.data import encode, synthetic_photo
from servelab.model.preprocess import preprocess_bytes
from servelab.netutil import free_port
from servelab.service.process import ServiceProcess, wait_until
from tests.conftest import cosine


@pytest.fixture(scope="module")
def http(service):
    with httpx.Client(base_url=service.url, timeout=60) as c:
        yield c


def assert_still_serves(http, photos):
    r = http.post("/embed", content=photos[0], headers={"Content-Type": "image/jpeg"})
    assert r.status_code == 200, r.text
    assert len(r.json()["embeddings"][0]) == 512


# --- parity -------------------------------------------------------------------------------------
def test_local_remote_auto_parity(service, photos):
    with InferenceClient(mode="local") as local, InferenceClient(mode="remote", url=service.url) as remote, \
            InferenceClient(mode="auto", url=service.url) as auto:
        a, b, c = local.embed_images(photos), remote.embed_images(photos), auto.embed_images(photos)
        assert local.mode_used == "local" and remote.mode_used == "remote" and auto.mode_used == "remote"
    assert cosine(a, b).min() >= 0.9999
    assert cosine(a, c).min() >= 0.9999
    assert remote.weights == local.weights == "random-init (seed 0)"


def test_auto_falls_back_to_local_and_says_so(photos, caplog):
    dead = f"http://127.0.0.1:{free_port()}"
    with caplog.at_level("WARNING"), InferenceClient(mode="auto", url=dead) as client:
        out = client.embed_images(photos[:1])
        assert client.mode_used == "local"
        assert client.fallback_reason and "not ready" in client.fallback_reason
    assert out.shape == (1, 512)
    assert sum("in-process" in r.message for r in caplog.records) == 1


def test_remote_mode_without_server_is_a_clear_error(photos):
    dead = f"http://127.0.0.1:{free_port()}"
    with InferenceClient(mode="remote", url=dead) as client:
        with pytest.raises(InferenceError, match="no service"):
            client.embed_images(photos[:1])


def test_jpeg_and_tensor_payloads_agree(service, photos):
    with InferenceClient(mode="remote", url=service.url, payload="jpeg") as j, \
            InferenceClient(mode="remote", url=service.url, payload="tensor") as t:
        assert cosine(j.embed_images(photos), t.embed_images(photos)).min() >= 0.9999


def test_uint8_pixels_give_the_float32_tensors_embeddings(http, photos):
    """The same crops sent as uint8 pixels (a quarter of the bytes, normalised by the service) and as the float32
    tensor the client would send: the same embeddings, one request at a time and several in one request."""
    from servelab.model.preprocess import decode_image, normalise, pixels_pil

    pixels = np.stack([pixels_pil(decode_image(p, reduce_to=224)) for p in photos[:3]])
    for batch in (pixels[:1], pixels):
        shape = ",".join(map(str, batch.shape))
        as_float = http.post("/embed/tensor", content=normalise(batch).tobytes(),
                             headers={**_tensor_headers(batch.shape), "Accept": "application/octet-stream"})
        as_uint8 = http.post("/embed/tensor", content=np.ascontiguousarray(batch).tobytes(),
                             headers={"Content-Type": "application/octet-stream", "X-Shape": shape, "X-Dtype": "uint8",
                                      "Accept": "application/octet-stream"})
        assert as_float.status_code == as_uint8.status_code == 200, as_uint8.text
        assert as_uint8.headers["x-shape"] == f"{batch.shape[0]},512"
        a, b = (np.frombuffer(r.content, "<f4").reshape(-1, 512) for r in (as_float, as_uint8))
        assert cosine(a, b).min() >= 0.99999
    with InferenceClient(mode="remote", url=str(http.base_url), payload="tensor") as client:  # it sends uint8 too
        assert cosine(client.embed_tensor(pixels), client.embed_tensor(normalise(pixels))).min() >= 0.99999
    short = http.post("/embed/tensor", content=b"\0" * 100, headers={"Content-Type": "application/octet-stream",
                                                                      "X-Shape": "1,3,224,224", "X-Dtype": "uint8"})
    assert short.status_code == 400 and short.json()["error"]["code"] == "bad_byte_count"
    assert "150528" in short.json()["error"]["message"]
    families = {f.name: f for f in text_string_to_metric_families(http.get("/metrics").text)}
    served = sum(s.value for s in families["servelab_requests"].samples if s.name == "servelab_requests_total"
                 and s.labels == {"endpoint": "/embed/tensor", "status": "200"})
    assert served >= 4  # counted under the route's template


def test_multipart_raw_and_base64_agree(http, photos, local_embedder):
    expected = local_embedder.embed(np.stack([preprocess_bytes(p) for p in photos[:3]]))
    multi = http.post("/embed", files=[("files", (f"p{i}.jpg", p, "image/jpeg")) for i, p in enumerate(photos[:3])])
    b64 = http.post("/embed/base64", json={"images": [base64.b64encode(p).decode() for p in photos[:3]]})
    raw = http.post("/embed", content=photos[0], headers={"Content-Type": "image/jpeg"})
    for r in (multi, b64, raw):
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["weights"] == "random-init (seed 0)" and body["dim"] == 512
        assert r.headers["x-servelab-weights"] == "random-init (seed 0)"
    assert cosine(np.array(multi.json()["embeddings"]), expected).min() >= 0.9999
    assert cosine(np.array(b64.json()["embeddings"]), expected).min() >= 0.9999
    assert cosine(np.array(raw.json()["embeddings"]), expected[:1]).min() >= 0.9999


def test_png_with_transparency_and_palette_served(http):
    rgba = Image.new("RGBA", (300, 200), (10, 200, 30, 128))
    pal = synthetic_photo(9).convert("P", palette=Image.ADAPTIVE)
    for img in (rgba, pal):
        buf = io.BytesIO()
        img.save(buf, format="PNG")
        r = http.post("/embed", content=buf.getvalue(), headers={"Content-Type": "image/png"})
        assert r.status_code == 200, r.text


def test_32_concurrent_requests_get_their_own_embedding(service, local_embedder):
    images = [encode(synthetic_photo(100 + i, (320, 240))) for i in range(32)]
    expected = local_embedder.embed(np.stack([preprocess_bytes(b) for b in images]))

    def one(i):
        with InferenceClient(mode="remote", url=service.url) as c:
            return c.embed_images([images[i]])[0]

    with cf.ThreadPoolExecutor(32) as pool:
        got = np.stack(list(pool.map(one, range(32))))
    sims = got @ expected.T
    assert np.all(np.diag(sims) >= 0.9999)
    assert np.all(np.argmax(sims, axis=1) == np.arange(32))  # nobody got a neighbour's row


# --- operational endpoints --------------------------------------------------------------------
def test_info_and_metrics(http, photos):
    info = http.get("/info").json()
    assert info["weights"] == "random-init (seed 0)" and info["engine"]["engine"] == "onnx"
    assert info["embedding_dim"] == 512 and info["ready"] is True
    cores = len(os.sched_getaffinity(0))  # two instances on half the cores each, beside the all-cores session
    assert (info["engine"].get("instances") or {}).get("count") == (2 if cores > 1 else None)
    runs = info["batcher"]["run_ms_by_batch"]  # what the batcher learnt a batch costs
    if cores == 1:  # one session: the warm-up's runs taught it
        assert "1" in runs and len(runs) >= 2
    assert all(ms > 0 for ms in runs.values())
    assert 0 <= info["batcher"]["fixed_cost_ms"] <= min(runs.values(), default=0)
    http.post("/embed", content=photos[0], headers={"Content-Type": "image/jpeg"})
    junk = http.post("/embed", content=b"junk", headers={"Content-Type": "image/jpeg"})
    assert junk.status_code == 400 and junk.headers["x-servelab-weights"] == "random-init (seed 0)"  # refusals too
    text = http.get("/metrics").text
    families = {f.name: f for f in text_string_to_metric_families(text)}
    for name in ("servelab_requests", "servelab_request_latency_seconds", "servelab_batch_size",
                 "servelab_queue_depth", "servelab_rejections"):
        assert name in families, name
    ok = sum(s.value for s in families["servelab_requests"].samples
             if s.name == "servelab_requests_total" and s.labels["endpoint"] == "/embed" and s.labels["status"] == "200")
    assert ok >= 1
    refused = sum(s.value for s in families["servelab_requests"].samples
                  if s.name == "servelab_requests_total" and s.labels == {"endpoint": "/embed", "status": "400"})
    assert refused >= 1  # counted under its route's template and the status it got
    timed = [s.value for s in families["servelab_request_latency_seconds"].samples
             if s.name == "servelab_request_latency_seconds_count" and s.labels["endpoint"] == "/embed"]
    assert timed and timed[0] >= 2
    rejected = {s.labels["reason"]: s.value for s in families["servelab_rejections"].samples if s.name.endswith("_total")}
    assert rejected.get("not_an_image", 0) >= 1
    batch_count = [s.value for s in families["servelab_batch_size"].samples if s.name == "servelab_batch_size_count"]
    assert batch_count and batch_count[0] >= 1


# --- bad input: each a 4xx JSON error naming the problem, and the server keeps serving -----------
def _tensor_headers(shape, dtype="float32"):
    return {"Content-Type": "application/octet-stream", "X-Shape": ",".join(map(str, shape)), "X-Dtype": dtype}


def _bomb() -> bytes:
    buf = io.BytesIO()
    Image.new("L", (3000, 3000)).save(buf, format="PNG")  # 9 Mpx, compresses to a few KB
    return buf.getvalue()


BAD_INPUTS = {
    "empty body": ("/embed", dict(content=b"", headers={"Content-Type": "image/jpeg"}), 400, "empty"),
    "zero-byte file": ("/embed", dict(files=[("files", ("a.jpg", b"", "image/jpeg"))]), 400, "empty"),
    "not an image": ("/embed", dict(content=b"hello world" * 10, headers={"Content-Type": "image/jpeg"}), 400, "not_an_image"),
    "truncated jpeg": ("/embed", dict(content=encode(synthetic_photo(1))[:3000], headers={"Content-Type": "image/jpeg"}), 400, "corrupt"),
    "jpeg cut inside its header": ("/embed", dict(content=encode(synthetic_photo(1))[:300], headers={"Content-Type": "image/jpeg"}), 400, "corrupt"),
    "unsupported content type": ("/embed", dict(content=b"x", headers={"Content-Type": "text/plain"}), 415, "unsupported_media_type"),
    "over byte limit": ("/embed", dict(content=b"\xff\xd8" + b"0" * (2 * 1024 * 1024 + 10), headers={"Content-Type": "image/jpeg"}), 413, "too_large"),
    "over pixel limit": ("/embed", dict(content=_bomb(), headers={"Content-Type": "image/png"}), 413, "too_many_pixels"),
    "malformed base64": ("/embed/base64", dict(json={"images": ["not base64!!"]}), 400, "bad_base64"),
    "wrong json schema": ("/embed/base64", dict(json={"imgs": ["aGVsbG8="]}), 422, "bad_schema"),
    "not json": ("/embed/base64", dict(content=b"{nope", headers={"Content-Type": "application/json"}), 400, "bad_json"),
    "too many files (one over)": ("/embed", dict(files=[("files", (f"{i}.jpg", b"x", "image/jpeg")) for i in range(9)]), 413, "too_many_images"),
    "too many files (far over)": ("/embed", dict(files=[("files", (f"{i}.jpg", b"x", "image/jpeg")) for i in range(40)]), 413, "too_many_images"),
    "too many images": ("/embed/base64", dict(json={"images": [base64.b64encode(b"x").decode()] * 9}), 413, "too_many_images"),
    "tensor wrong dtype": ("/embed/tensor", dict(content=np.zeros((1, 3, 224, 224), np.float16).tobytes(), headers=_tensor_headers((1, 3, 224, 224), "float16")), 400, "bad_dtype"),
    "tensor wrong shape": ("/embed/tensor", dict(content=np.zeros((1, 3, 64, 64), np.float32).tobytes(), headers=_tensor_headers((1, 3, 64, 64))), 400, "bad_shape"),
    "tensor wrong byte count": ("/embed/tensor", dict(content=np.zeros((1, 3, 224, 100), np.float32).tobytes(), headers=_tensor_headers((1, 3, 224, 224))), 400, "bad_byte_count"),
    "tensor missing shape": ("/embed/tensor", dict(content=b"\0" * 16, headers={"Content-Type": "application/octet-stream"}), 400, "missing_shape"),
    "tensor with NaN": ("/embed/tensor", dict(content=np.full((1, 3, 224, 224), np.nan, np.float32).tobytes(), headers=_tensor_headers((1, 3, 224, 224))), 400, "non_finite"),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS), ids=list(BAD_INPUTS))
def test_bad_input_is_a_named_4xx_and_service_survives(http, photos, case):
    path, kwargs, status, code = BAD_INPUTS[case]
    r = http.post(path, **kwargs)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["code"] == code and err["message"]
    assert_still_serves(http, photos)


def test_client_surfaces_server_error_message(service):
    with InferenceClient(mode="remote", url=service.url) as client:
        with pytest.raises(InferenceError) as exc:
            client.embed_images([b"not an image at all"])
    assert exc.value.status == 400 and exc.value.code == "not_an_image" and "not a recognised image" in str(exc.value)


# --- readiness and load shedding: a second, deliberately small service -----------------------------
@pytest.fixture(scope="module")
def slow_start_service(onnx_meta, tmp_path_factory):
    """Long warm-up (so /readyz is observably false), batch 1 and a 2-image queue (so it must shed)."""
    svc = ServiceProcess(env={"SERVELAB_WARMUP_ITERS": "12", "SERVELAB_MAX_BATCH": "1", "SERVELAB_MAX_QUEUE": "2",
                              "SERVELAB_MAX_DELAY_MS": "0", "SERVELAB_THREADS": "1"},
                         log_path=tmp_path_factory.mktemp("slow") / "service.log", wait_ready=False)
    svc.start()  # returns once /healthz answers
    early = {"readyz": httpx.get(svc.url + "/readyz").status_code,
             "embed": httpx.post(svc.url + "/embed", content=encode(synthetic_photo(0)), headers={"Content-Type": "image/jpeg"})}
    assert wait_until(lambda: httpx.get(svc.url + "/readyz").status_code == 200, timeout=180, interval=0.2)
    yield svc, early
    svc.stop()


def test_readyz_false_before_warmup_true_after(slow_start_service):
    svc, early = slow_start_service
    assert early["readyz"] == 503
    assert early["embed"].status_code == 503 and early["embed"].json()["error"]["code"] == "warming_up"
    assert early["embed"].headers.get("retry-after")
    assert httpx.get(svc.url + "/readyz").json() == {"ready": True, "weights": "random-init (seed 0)"}


def test_full_queue_sheds_with_503_and_retry_after(slow_start_service):
    svc, _ = slow_start_service
    x = np.zeros((1, 3, 224, 224), np.float32).tobytes()

    def one(_):
        return httpx.post(svc.url + "/embed/tensor", content=x, headers=_tensor_headers((1, 3, 224, 224)), timeout=120)

    with cf.ThreadPoolExecutor(24) as pool:
        responses = list(pool.map(one, range(24)))
    codes = [r.status_code for r in responses]
    shed = [r for r in responses if r.status_code == 503]
    assert shed and codes.count(200) >= 1 and set(codes) <= {200, 503}
    # the in-flight limit defaults to the queue bound, so admission refuses them before their bodies are read
    assert all(r.headers.get("retry-after") and r.json()["error"]["code"] == "overloaded" for r in shed)
    metrics = httpx.get(svc.url + "/metrics").text
    assert 'servelab_rejections_total{reason="overloaded"}' in metrics
    ok = httpx.post(svc.url + "/embed/tensor", content=x, headers=_tensor_headers((1, 3, 224, 224)))
    assert ok.status_code == 200


def test_remote_client_knows_the_weights_before_its_first_request(service):
    with InferenceClient(mode="remote", url=service.url) as client:
        assert client.weights == "random-init (seed 0)"
