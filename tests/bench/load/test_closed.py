"""The closed loop: its counts are exact for a plain callable and, against real servers, equal to the server's
own counters (tritonserver's statistics, the service's metrics)."""

import threading
import time

import pytest

from servelab.bench.load import LoadOpts, client_factory, closed_loop

from ..conftest import TINY

QUICK = LoadOpts(min_requests=5, min_p50s=2, max_windows=3, tolerance=0.5, max_warmup_s=5)


def test_closed_loop_counts_are_exact_for_a_plain_callable():
    calls = []
    lock = threading.Lock()

    def factory(i):
        def work():
            time.sleep(0.002)
            with lock:
                calls.append(i)
            return 2
        return work

    res = closed_loop(factory, 3, QUICK)
    assert res.sent_total == res.ok_total == len(calls)
    assert res.images_total == 2 * len(calls)
    assert set(calls) == {0, 1, 2}
    assert res.errors == 0 and res.requests > 0 and res.windows_used >= 1
    assert res.images == 2 * res.requests


@pytest.mark.triton
@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_closed_loop_counts_equal_triton_stats_exactly(tiny_triton, tiny_factory, protocol):
    from servelab.triton.server_stats import stats_delta

    with stats_delta(tiny_triton.http_url, TINY) as d:
        res = closed_loop(tiny_factory(protocol), 4, QUICK)
        d.expected_requests = res.ok_total
    s = d.result.summary()
    assert res.errors == 0 and res.sent_total == res.ok_total
    assert s["requests"] == res.ok_total  # every request the generator sent, warm-up included
    assert s["inferences"] == res.images_total
    assert s["failures"] == 0
    assert res.requests <= res.ok_total  # the measured windows are a subset


def test_closed_loop_counts_equal_service_metrics(service):
    """Same exactness against the FastAPI service's own Prometheus counters (real model, real uvicorn)."""
    from servelab.bench.load.inputs import sample_tensor
    from servelab.bench.servers import service_delta, service_metrics
    from servelab.client import InferenceClient

    before = service_metrics(service.url)
    res = closed_loop(
        client_factory(lambda: InferenceClient(mode="remote", backend="fastapi", url=service.url, payload="tensor"),
                       tensor=sample_tensor(1)),
        2, LoadOpts.smoke())
    d = service_delta(before, service_metrics(service.url))
    assert res.errors == 0
    assert d["requests"].get("/embed/tensor 200") == res.ok_total == res.sent_total
    assert d["images"] == res.images_total
    assert sum(d["batch_histogram"].values()) == d["executions"] >= 1
