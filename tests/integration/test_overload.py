"""Overload behaviour of the service, on a real uvicorn on loopback, with a deliberately slow engine.

The thing under test is the service (admission, deadlines, metrics, the client's retries), so the engine is a
real object with the Embedder interface that takes a known time per call: the timings then say what the
service did, not how fast the CPU is.
"""

from __future__ import annotations

import concurrent.futures as cf
import socket
import threading
import time
import uuid

import httpx
import numpy as np
import pytest
import uvicorn
from prometheus_client.parser import text_string_to_metric_families

from servelab.client import InferenceClient, ServiceUnavailable
from servelab.config import Settings
from servelab.netutil import free_port
from servelab.service.app import create_app
from servelab.service.process import wait_until

TENSOR_HEADERS = {"Content-Type": "application/octet-stream", "X-Shape": "1,3,224,224", "X-Dtype": "float32"}
ONE_TENSOR = np.zeros((1, 3, 224, 224), np.float32).tobytes()


class SlowEmbedder:
    """Embedder-shaped stand-in: each call sleeps `seconds_per_call`, then returns one unit vector per row."""

    engine = "slow-stand-in"
    weights = "stand-in (no model)"

    def __init__(self, seconds_per_call: float):
        self.seconds_per_call = seconds_per_call
        self.rows_computed = 0
        self.lock = threading.Lock()

    def embed(self, batch: np.ndarray) -> np.ndarray:
        time.sleep(self.seconds_per_call)
        with self.lock:
            self.rows_computed += batch.shape[0]
        out = np.zeros((batch.shape[0], 512), np.float32)
        out[:, 0] = 1.0
        return out

    def info(self) -> dict:
        return {"engine": self.engine, "seconds_per_call": self.seconds_per_call}


class Server:
    """create_app(settings, embedder) under a real uvicorn on a free loopback port, in a background thread."""

    def __init__(self, embedder: SlowEmbedder, **settings):
        # the wait budget and the count always admitted off unless a test is about them: each test below times its
        # waits with a slow engine
        base = dict(max_batch=1, max_delay_ms=0, warmup_iters=1, decode_threads=1, max_wait_ms=0, always_admit=0)
        self.settings = Settings.from_env(**{**base, **settings})
        self.embedder = embedder
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(create_app(self.settings, embedder), host="127.0.0.1", port=self.port,
                                log_level="warning", access_log=False)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> Server:
        slow, self.embedder.seconds_per_call = self.embedder.seconds_per_call, 0.0  # warm up at once
        self.thread.start()
        assert wait_until(lambda: _ready(self.url), timeout=20), "stand-in service did not become ready"
        self.embedder.seconds_per_call, self.embedder.rows_computed = slow, 0  # count only what the test sends
        return self

    def __exit__(self, *exc):
        self.server.should_exit = True
        self.thread.join(10)

    def metric(self, name: str, **labels) -> float:
        text = httpx.get(self.url + "/metrics").text
        return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
                   if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))

    def occupy(self, n: int) -> list[cf.Future]:
        """Start n tensor requests in the background and return once the service counts them in flight."""
        pool = cf.ThreadPoolExecutor(n)
        futures = [pool.submit(httpx.post, self.url + "/embed/tensor", content=ONE_TENSOR, headers=TENSOR_HEADERS,
                               timeout=60) for _ in range(n)]
        pool.shutdown(wait=False)
        assert wait_until(lambda: self.metric("servelab_in_flight") >= n, timeout=10)
        return futures


def _read_response(sock: socket.socket) -> tuple[str, str]:
    """One HTTP/1.1 response off a raw socket: (status line + headers, body)."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536) or b"\r\n\r\n"
    head, _, body = data.partition(b"\r\n\r\n")
    length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")), 0)
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return head.decode(), body.decode()


def _ready(url: str) -> bool:
    try:
        return httpx.get(url + "/readyz", timeout=1).status_code == 200
    except httpx.TransportError:
        return False


def test_full_service_answers_503_before_reading_the_body():
    with Server(SlowEmbedder(1.0), max_in_flight=2) as srv:
        busy = srv.occupy(2)
        # announce a 5 MB body and send none of it: only a server that does not read bodies can answer
        with socket.create_connection(("127.0.0.1", srv.port), timeout=5) as sock:
            sock.sendall(b"POST /embed HTTP/1.1\r\nHost: x\r\nContent-Type: image/jpeg\r\n"
                         b"Content-Length: 5000000\r\n\r\n")
            head, body = _read_response(sock)
        assert head.startswith("HTTP/1.1 503"), head
        assert "retry-after: " in head.lower()
        assert '"code":"overloaded"' in body and "limit is 2" in body
        assert [f.result().status_code for f in busy] == [200, 200]  # the admitted ones were served
        assert srv.metric("servelab_rejections_total", reason="overloaded") == 1
        # answered by the gate in front of the app, yet counted under its route's template and naming the weights
        assert srv.metric("servelab_requests_total", endpoint="/embed", status="503") == 1
        assert "x-servelab-weights: stand-in (no model)" in head.lower()
        assert srv.embedder.rows_computed == 2


def test_a_request_past_its_deadline_is_dropped_not_computed():
    with Server(SlowEmbedder(1.5), max_in_flight=10, request_timeout_s=0.5) as srv:
        with cf.ThreadPoolExecutor(3) as pool:
            responses = list(pool.map(
                lambda _: httpx.post(srv.url + "/embed/tensor", content=ONE_TENSOR, headers=TENSOR_HEADERS, timeout=30),
                range(3)))
        codes = sorted(r.status_code for r in responses)
        assert codes == [200, 503, 503], [r.text for r in responses]
        for r in (r for r in responses if r.status_code == 503):
            assert r.json()["error"]["code"] == "deadline_exceeded" and "without computing" in r.json()["error"]["message"]
            assert r.headers["retry-after"]
        time.sleep(2)  # had the dropped requests stayed queued, the engine would compute them now
        assert srv.embedder.rows_computed == 1
        assert srv.metric("servelab_rejections_total", reason="deadline_exceeded") == 2


def _server_wait_ms(response: httpx.Response) -> float:
    """The `wait` the service reports in Server-Timing: from the body's arrival until the engine took it."""
    timings = dict(part.strip().split(";dur=") for part in response.headers["server-timing"].split(","))
    return float(timings["wait"])


def test_a_burst_far_over_capacity_keeps_admitted_waits_within_the_budget():
    # a batch takes 0.3 s, one image at a time: 40 requests at once are 12 s of work, many times the 0.8 s budget.
    # A count limit of 64 alone would admit them all and keep the last one waiting about 12 s.
    with Server(SlowEmbedder(0.3), max_in_flight=64, max_wait_ms=800, request_timeout_s=30) as srv:
        for _ in range(3):  # the engine's pace, learnt from a few batches at its real speed
            assert httpx.post(srv.url + "/embed/tensor", content=ONE_TENSOR, headers=TENSOR_HEADERS,
                              timeout=30).status_code == 200
        with cf.ThreadPoolExecutor(40) as pool:
            responses = list(pool.map(
                lambda _: httpx.post(srv.url + "/embed/tensor", content=ONE_TENSOR, headers=TENSOR_HEADERS, timeout=60),
                range(40)))
    ok = [r for r in responses if r.status_code == 200]
    shed = [r for r in responses if r.status_code != 200]
    assert ok and shed, [r.status_code for r in responses]
    assert {r.status_code for r in shed} == {503}
    for r in shed:
        assert r.json()["error"]["code"] in ("overloaded", "deadline_exceeded"), r.text
        assert int(r.headers["retry-after"]) >= 1
    waits = [_server_wait_ms(r) for r in ok]
    assert max(waits) <= 800, waits  # what the service measured, not the wall clock of a busy machine


def _post_tensor(url: str) -> httpx.Response:
    return httpx.post(url + "/embed/tensor", content=ONE_TENSOR, headers=TENSOR_HEADERS, timeout=60)


def _learn_the_pace(srv: Server) -> None:
    for _ in range(3):  # the engine's pace, learnt from a few batches at its real speed
        assert _post_tensor(srv.url).status_code == 200


@pytest.mark.parametrize("seconds_per_call", [0.1, 0.2])
def test_the_default_wait_budget_is_one_full_batch_at_the_engines_pace(seconds_per_call):
    # batches of one image here (one request at a time), a batch of up to 8: the budget is 8 runs of this engine
    with Server(SlowEmbedder(seconds_per_call), max_batch=8, max_wait_ms=None) as srv:
        _learn_the_pace(srv)
        limits = httpx.get(srv.url + "/info").json()["limits"]
    assert limits["wait_budget"] == "auto"
    assert 8 * seconds_per_call * 1000 <= limits["max_wait_ms"] <= 8 * seconds_per_call * 1000 * 1.25, limits


def test_a_wait_budget_set_in_ms_is_kept_whatever_the_engine():
    with Server(SlowEmbedder(0.1), max_batch=8, max_wait_ms=300) as srv:
        _learn_the_pace(srv)
        limits = httpx.get(srv.url + "/info").json()["limits"]
    assert (limits["wait_budget"], limits["max_wait_ms"]) == ("set", 300.0)


def test_a_closed_loop_within_the_count_always_admitted_is_never_refused_however_long_it_waits():
    # six clients, each sending its next request when the last is answered, on an engine doing 4 images/s: each
    # request waits about 1.25 s, far past the 300 ms budget, which alone would refuse or drop most of them
    with Server(SlowEmbedder(0.25), max_in_flight=64, max_wait_ms=300, always_admit=6) as srv:
        _learn_the_pace(srv)

        def client(_):
            return [_post_tensor(srv.url) for _ in range(4)]

        with cf.ThreadPoolExecutor(6) as pool:
            responses = [r for rs in pool.map(client, range(6)) for r in rs]
        assert [r.status_code for r in responses] == [200] * 24, [r.text for r in responses if r.status_code != 200]
        assert max(_server_wait_ms(r) for r in responses) > 300  # waits the budget would not have let through
        assert srv.metric("servelab_rejections_total") == 0


def test_past_capacity_the_first_refusal_leaves_only_the_time_bound_until_its_retry_after_passes():
    # an engine doing 2 images/s, a 600 ms budget, 6 requests always admitted: six in flight are admitted whatever
    # their wait (3 s); the seventh is refused, and so is a request arriving once fewer than six are in flight again
    # (while the gate is refusing, the count admits nobody: past capacity the time bound keeps the wait short)
    with Server(SlowEmbedder(0.5), max_in_flight=64, max_wait_ms=600, always_admit=6) as srv:
        _learn_the_pace(srv)
        inside = srv.occupy(6)
        seventh = _post_tensor(srv.url)
        assert seventh.status_code == 503 and "wait budget" in seventh.json()["error"]["message"], seventh.text
        assert wait_until(lambda: srv.metric("servelab_in_flight") <= 4, timeout=10)
        fewer = _post_tensor(srv.url)  # about 2 s of work ahead, 4 in flight: within the count, but refusing
        assert fewer.status_code == 503 and fewer.json()["error"]["code"] == "overloaded", fewer.text
        assert [f.result().status_code for f in inside] == [200] * 6
        # the last refusal's Retry-After passed, and no one was refused since: the count admits six again, the last
        # of them with 2.5 s of work ahead
        time.sleep(int(fewer.headers["retry-after"]))
        again = srv.occupy(6)
        assert [f.result().status_code for f in again] == [200] * 6
        assert srv.metric("servelab_rejections_total") == 2


def test_404_probes_add_one_series_not_one_per_path():
    with Server(SlowEmbedder(0.0)) as srv, httpx.Client(base_url=srv.url) as http:
        probes = [f"/{uuid.uuid4().hex}/admin.php" for _ in range(40)]
        assert {http.get(p).status_code for p in probes} == {404}
        text = http.get("/metrics").text
    assert not any(p in text for p in probes)
    series = [line for line in text.splitlines() if line.startswith("servelab_requests_total{")]
    assert sum('endpoint="unmatched",status="404"' in line for line in series) == 1
    assert any('endpoint="unmatched",status="404"} 40.0' in line for line in series)


def test_client_waits_as_long_as_retry_after_asks_then_succeeds():
    with Server(SlowEmbedder(1.2), max_in_flight=1) as srv:
        busy = srv.occupy(1)
        with InferenceClient(mode="remote", url=srv.url, payload="tensor") as client:
            t0 = time.perf_counter()
            out = client.embed_tensor(np.zeros((1, 3, 224, 224), np.float32))
            waited = time.perf_counter() - t0
        assert out.shape == (1, 512)
        assert busy[0].result().status_code == 200
        assert srv.metric("servelab_rejections_total", reason="overloaded") >= 1
        assert waited >= 1.0  # Retry-After is whole seconds, at least 1: the client did not come back sooner


def test_client_retries_are_bounded_and_the_refusal_is_explained():
    with Server(SlowEmbedder(6.0), max_in_flight=1) as srv:
        srv.occupy(1)
        x = np.zeros((1, 3, 224, 224), np.float32)
        with InferenceClient(mode="remote", url=srv.url, retries=0) as client:
            with pytest.raises(ServiceUnavailable) as refused:
                client.embed_tensor(x)
        assert refused.value.status == 503 and refused.value.code == "overloaded"
        assert refused.value.retry_after and refused.value.retry_after >= 1
        with InferenceClient(mode="remote", url=srv.url, retries=2, retry_budget_s=30) as client:
            t0 = time.perf_counter()
            with pytest.raises(ServiceUnavailable, match="in flight"):
                client.embed_tensor(x)
            gave_up_after = time.perf_counter() - t0
        assert gave_up_after < 5.0  # three attempts, two waits of the server's few seconds at most... then stop
        assert srv.metric("servelab_rejections_total", reason="overloaded") == 4
