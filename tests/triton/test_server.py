"""A real embedded tritonserver: parity with local ONNX Runtime and the FastAPI service, the JPEG ensemble,
dynamic batching seen in the server's own statistics, live reconfiguration, and bad input that fails clearly
while the server keeps serving."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from servelab.client import InferenceClient, ServiceUnavailable
from servelab.client.errors import InferenceError
from servelab.client.triton import TritonBackend, TritonInferenceError, TritonUnavailable
from servelab.model.export import parity_batch
from servelab.model.preprocess import preprocess_batch
from servelab.netutil import free_port
from servelab.triton.control import get_config, reconfigure
from servelab.triton.server_stats import read_metrics, read_stats, stats_delta

pytestmark = pytest.mark.triton

ENCODER = "openclip_vit_b32_cpu"


def cos(a, b):
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return (a * b).sum(axis=1)


def url_for(srv, protocol):
    return srv.http_url if protocol == "http" else srv.grpc_url


@pytest.fixture(scope="module")
def batch():
    return parity_batch(4)


@pytest.fixture(scope="module")
def reference(local_embedder, batch):
    return local_embedder.embed(batch)


def assert_still_serves(srv, batch, reference):
    with _closing(TritonBackend("grpc", srv.grpc_url)) as b:
        assert cos(b.embed_tensor(batch[:1]), reference[:1]).min() >= 0.9999


class _closing:
    def __init__(self, b):
        self.b = b

    def __enter__(self):
        return self.b

    def __exit__(self, *exc):
        self.b.close()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_tensor_path_equals_local_onnxruntime(triton, batch, reference, protocol, onnx_meta):
    with _closing(TritonBackend(protocol, url_for(triton, protocol))) as b:
        assert b.ready()
        assert b.weights == onnx_meta["weights"]  # the weights label travels in the model config
        out = b.embed_tensor(batch)
    assert out.shape == (4, 512) and out.dtype == np.float32
    assert cos(out, reference).min() >= 0.9999
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-4)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_jpeg_ensemble_equals_client_side_preprocessing(triton, jpegs, local_embedder, protocol, onnx_meta):
    expected = local_embedder.embed(preprocess_batch(jpegs))
    with InferenceClient(mode="remote", backend=f"triton-{protocol}", url=url_for(triton, protocol),
                         payload="jpeg") as client:
        via_ensemble = client.embed_images(jpegs)
        assert client.mode_used == "remote"
        assert client.weights == onnx_meta["weights"]  # labelled even without a ready() probe
    with InferenceClient(mode="remote", backend=f"triton-{protocol}", url=url_for(triton, protocol),
                         payload="tensor") as client:
        via_tensor = client.embed_images(jpegs)
    assert cos(via_ensemble, expected).min() >= 0.9999
    assert cos(via_tensor, expected).min() >= 0.9999


def test_png_through_ensemble(triton, local_embedder):
    from servelab.data import encode, synthetic_photo

    png = encode(synthetic_photo(7, (300, 200)), "PNG")
    with _closing(TritonBackend("http", triton.http_url)) as b:
        out = b.embed_encoded([png])
    assert cos(out, local_embedder.embed(preprocess_batch([png]))).min() >= 0.9999


def test_triton_equals_fastapi_service(triton, service, jpegs):
    with InferenceClient(mode="remote", backend="fastapi", url=service.url, payload="jpeg") as c:
        from_service = c.embed_images(jpegs)
    with InferenceClient(mode="remote", backend="triton-grpc", url=triton.grpc_url, payload="jpeg") as c:
        from_triton = c.embed_images(jpegs)
    assert cos(from_triton, from_service).min() >= 0.9999


def test_concurrent_batch1_requests_are_batched_server_side(triton, batch, reference):
    n_clients, per_client = 16, 2
    calls = [lambda b, i=i: [b.embed_tensor(batch[i % 4 : i % 4 + 1]) for _ in range(per_client)]
             for i in range(n_clients)]
    with stats_delta(triton.http_url, ENCODER, metrics_url=triton.metrics_url,
                     expected_requests=n_clients * per_client) as d:
        outs = dict(enumerate(_at_once(triton, calls)))  # one client per thread
    errors = [o for o in outs.values() if isinstance(o, Exception)]
    assert not errors, errors
    # every client got all its answers
    assert len(outs) == n_clients and all(isinstance(r, list) and len(r) == per_client for r in outs.values())
    for i, results in outs.items():
        for r in results:
            assert cos(r, reference[i % 4 : i % 4 + 1]).min() >= 0.9999
    s = d.result.summary()
    assert s["requests"] == s["inferences"] == n_clients * per_client
    assert s["executions"] < s["requests"]
    assert s["avg_batch"] > 1.0, s
    assert sum(size * n for size, n in s["batch_hist"].items()) == s["inferences"]
    for key in ("avg_queue_ms", "avg_compute_input_ms", "avg_compute_infer_ms", "avg_compute_output_ms"):
        assert s[key] is not None and s[key] >= 0
    # the Prometheus metrics tell the same story
    m = d.metrics_summary
    assert m["requests"] == s["requests"] and m["executions"] == s["executions"]
    assert m["avg_batch"] == pytest.approx(s["avg_batch"])


def test_reload_with_new_queue_delay_and_instances_takes_effect(triton, triton_repo, batch, reference):
    from servelab.triton.repository import parse_config

    before = get_config(triton.http_url, ENCODER)
    old_delay = int(before["dynamic_batching"]["max_queue_delay_microseconds"])
    new_delay = old_delay + 1111
    cfg = reconfigure(triton.http_url, ENCODER, max_queue_delay_us=new_delay, instances=2, repository=triton_repo)
    try:
        assert int(cfg["dynamic_batching"]["max_queue_delay_microseconds"]) == new_delay
        assert cfg["instance_group"][0]["count"] == 2
        # read back independently, and the live repository file carries the change for the next restart
        assert int(get_config(triton.http_url, ENCODER)["dynamic_batching"]["max_queue_delay_microseconds"]) == new_delay
        on_disk = parse_config(triton_repo / ENCODER / "config.pbtxt")
        assert on_disk.dynamic_batching.max_queue_delay_microseconds == new_delay
        with _closing(TritonBackend("http", triton.http_url)) as b:
            assert cos(b.embed_tensor(batch), reference).min() >= 0.9999
            assert b.embed_encoded([_jpeg()]).shape == (1, 512)  # the ensemble still chains to the new encoder
        # same server process: it never restarted
        assert triton.running()
        assert read_stats(triton.http_url, ENCODER).requests >= 1
    finally:
        reconfigure(triton.http_url, ENCODER, max_queue_delay_us=old_delay, instances=1, repository=triton_repo)
    assert int(get_config(triton.http_url, ENCODER)["dynamic_batching"]["max_queue_delay_microseconds"]) == old_delay


def _at_once(srv, calls) -> list:
    """Each call(backend) on its own HTTP client and thread, released together; what each returned, or the
    TritonInferenceError it raised."""
    start, outcomes = threading.Barrier(len(calls)), [None] * len(calls)

    def one(i):
        with _closing(TritonBackend("http", srv.http_url)) as b:
            start.wait()
            try:
                outcomes[i] = calls[i](b)
            except TritonInferenceError as exc:
                outcomes[i] = exc

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return outcomes


def test_a_bounded_queue_refuses_at_once_and_the_default_unbounded_one_serves_everyone(triton, batch, reference):
    # the lab's config leaves the queue unbounded (a bound turns off the batcher's prefetching);
    # `servelab bench overload` bounds it to measure shedding
    assert int(get_config(triton.http_url, ENCODER)["dynamic_batching"]
               .get("default_queue_policy", {}).get("max_queue_size", 0)) == 0
    cfg = reconfigure(triton.http_url, ENCODER, max_queue=1)
    try:
        assert int(cfg["dynamic_batching"]["default_queue_policy"]["max_queue_size"]) == 1
        outcomes = _at_once(triton, [lambda b: b.embed_tensor(batch[:1])] * 12)
        refused = [o for o in outcomes if isinstance(o, Exception)]
        served = [o for o in outcomes if not isinstance(o, Exception)]
        assert refused and served, "with one place in the queue, some of 12 simultaneous requests are refused"
        assert all("queue" in str(e).lower() for e in refused), [str(e) for e in refused]
        assert cos(np.concatenate(served), np.repeat(reference[:1], len(served), axis=0)).min() >= 0.9999
    finally:
        reconfigure(triton.http_url, ENCODER, max_queue=0)
    assert not [o for o in _at_once(triton, [lambda b: b.embed_tensor(batch[:1])] * 12) if isinstance(o, Exception)]


def test_a_config_override_is_undone_on_leaving_loaded_with(triton, batch, reference):
    # Triton keeps a load's config override until a load with another one: a plain reload would leave the
    # model unbatched, which is what loaded_with must never do.
    from servelab.triton.control import config_dict, loaded_with

    unbatched = config_dict(get_config(triton.http_url, ENCODER))
    del unbatched["dynamic_batching"]
    with loaded_with(triton.http_url, ENCODER, unbatched) as reported:
        assert "dynamic_batching" not in reported
        with _closing(TritonBackend("http", triton.http_url)) as b:
            assert cos(b.embed_tensor(batch), reference).min() >= 0.9999
    assert "dynamic_batching" in get_config(triton.http_url, ENCODER)


def _jpeg():
    from servelab.data import encode, synthetic_photo

    return encode(synthetic_photo(3, (256, 256)))


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_bad_input_is_a_typed_error_and_server_keeps_serving(triton, batch, reference, protocol):
    url = url_for(triton, protocol)
    cases = {}
    with _closing(TritonBackend(protocol, url, input_name="images")) as b:
        with pytest.raises(TritonInferenceError) as e:
            b.embed_tensor(batch)
        cases["input name"] = e.value
    with _closing(TritonBackend(protocol, url)) as b:
        with pytest.raises(TritonInferenceError) as e:
            b.embed_tensor(batch.astype(np.float64))
        cases["dtype"] = e.value
        with pytest.raises(TritonInferenceError) as e:
            b.embed_tensor(batch[:, :, :112, :112])
        cases["shape"] = e.value
        with pytest.raises(TritonInferenceError) as e:
            b.embed_tensor(np.zeros((33, 3, 224, 224), np.float32))
        cases["batch"] = e.value
        with pytest.raises(TritonInferenceError) as e:
            b.embed_encoded([b"this is not an image at all"])
        cases["non-image"] = e.value
        with pytest.raises(TritonInferenceError) as e:
            b.embed_encoded([_jpeg()[:300]])
        cases["corrupt"] = e.value
    with _closing(TritonBackend(protocol, url, model="openclip_vit_b32_not_loaded")) as b:
        assert not b.ready()
        with pytest.raises(TritonInferenceError) as e:
            b.embed_tensor(batch)
        cases["not loaded"] = e.value
    expect = {
        "input name": "images",
        "dtype": "FP64",
        "shape": "shape",
        "batch": "batch-size must be <= 32",
        "non-image": "not a recognised image",
        "corrupt": "corrupt or truncated",
        "not loaded": "openclip_vit_b32_not_loaded",
    }
    for case, exc in cases.items():
        assert isinstance(exc, InferenceError) and not isinstance(exc, TritonUnavailable), case
        assert expect[case] in exc.message, (case, exc.message)
        assert exc.backend == f"triton-{protocol}"
    assert_still_serves(triton, batch, reference)


def test_corrupt_image_fails_only_its_own_request(triton):
    """A bad image in a concurrent mix must not take the good requests of the same batch down with it."""
    good, bad = _jpeg(), b"\xff\xd8\xff garbage"
    results = _at_once(triton, [lambda b, blob=(bad if i % 4 == 0 else good): b.embed_encoded([blob]).shape
                                for i in range(8)])
    for i in range(8):
        if i % 4 == 0:
            assert isinstance(results[i], TritonInferenceError)
        else:
            assert results[i] == (1, 512), results[i]


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_server_not_running_when_client_starts(protocol, batch):
    dead = f"127.0.0.1:{free_port()}"
    with _closing(TritonBackend(protocol, dead, timeout=5)) as b:
        assert b.ready() is False
        with pytest.raises(TritonUnavailable) as e:
            b.embed_tensor(batch[:1])
    assert dead in str(e.value)
    assert isinstance(e.value, ServiceUnavailable)
    with InferenceClient(mode="remote", backend=f"triton-{protocol}", url=dead, timeout=5) as c:
        with pytest.raises(ServiceUnavailable):
            c.embed_tensor(batch[:1])


def test_metrics_reader_sees_every_model(triton):
    metrics = read_metrics(triton.metrics_url)
    assert {ENCODER, "preprocess_jpeg", "openclip_vit_b32_jpeg"} <= set(metrics)
    assert "nv_inference_request_success" in metrics[ENCODER]
