"""The gate as a middleware, under a real uvicorn on loopback, in front of an app that notes every request it is
handed: a refusal is answered by the gate alone, the app never runs for it, and an admitted request holds its slot
until the app has answered it."""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import threading

import httpx
import pytest
import uvicorn

from servelab.config import Settings
from servelab.netutil import free_port
from servelab.service.app import Service
from servelab.service.gate import WAIT_BOUND, Gate
from servelab.service.process import wait_until


class NotingApp:
    """The app behind the gate: notes each request (its path and what the gate put in its scope) and answers 200
    once `release` is set."""

    def __init__(self):
        self.seen: list[tuple[str, object]] = []
        self.release = threading.Event()

    async def __call__(self, scope, receive, send):
        self.seen.append((scope["path"], scope.get(WAIT_BOUND)))
        while not self.release.is_set():
            await asyncio.sleep(0.01)
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"ok"})


@pytest.fixture
def gated():
    svc = Service(Settings(max_in_flight=1, always_admit=0))
    svc.ready = True
    inner = NotingApp()
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(Gate(inner, svc=svc, routes={"/embed": object()}), host="127.0.0.1",
                                           port=port, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    assert wait_until(lambda: server.started, timeout=10)
    yield svc, inner, f"http://127.0.0.1:{port}"
    inner.release.set()
    server.should_exit = True
    thread.join(10)


def test_a_refusal_is_answered_by_the_gate_and_never_reaches_the_app(gated):
    svc, inner, url = gated
    with cf.ThreadPoolExecutor(1) as pool:
        first = pool.submit(httpx.post, url + "/embed", content=b"x", timeout=30)
        assert wait_until(lambda: svc.admission.in_flight == 1, timeout=10)
        refused = httpx.post(url + "/embed", content=b"x" * 1000, timeout=30)
        assert refused.status_code == 503 and int(refused.headers["retry-after"]) >= 1
        assert refused.headers["content-type"] == "application/json"
        assert refused.json()["error"]["code"] == "overloaded" and "limit is 1" in refused.json()["error"]["message"]
        assert inner.seen == [("/embed", False)]  # only the admitted one reached the app (no budget bound it)
        assert svc.admission.in_flight == 1  # its slot is held while the app works on it
        inner.release.set()
        assert first.result().status_code == 200
    assert svc.admission.in_flight == 0
    assert svc.metrics.registry.get_sample_value("servelab_rejections_total", {"reason": "overloaded"}) == 1


def test_only_posts_to_the_embedding_routes_pass_the_gate(gated):
    svc, inner, url = gated
    inner.release.set()
    svc.ready = False  # warming up: the embedding route is refused, everything else is the app's
    warming = httpx.post(url + "/embed", content=b"x", timeout=30)
    assert warming.status_code == 503 and warming.json()["error"]["code"] == "warming_up"
    assert httpx.get(url + "/healthz", timeout=30).status_code == 200
    assert httpx.get(url + "/embed", timeout=30).status_code == 200  # not a POST: the app's to answer (405 there)
    assert inner.seen == [("/healthz", None), ("/embed", None)]
    assert svc.admission.in_flight == 0
