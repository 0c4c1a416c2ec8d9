"""What a benchmark talks to: a served target started for the measurement, with its own clients and counters.

`served(target, engine=…)` is a context manager yielding a `Served` object: `.make_client()` (a fresh client per
worker), `.snapshot()` / `.delta(before, after)` (the server's own counters: the servelab service's Prometheus
`/metrics`, Triton's statistics), `.pid` (for RSS) and labels for the record. Targets:

  fastapi      servelab's FastAPI service (ServiceProcess subprocess), payload jpeg | tensor
  litserve     the same engine behind LitServe (peer baseline), payload jpeg (base64 JSON) | tensor
  triton-http  the embedded tritonserver (servelab.triton), payload tensor | jpeg (ensemble)
  triton-grpc  idem over gRPC

Servers are started on free loopback ports and stopped afterwards; their logs go into the run folder.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

TARGETS = ("fastapi", "litserve", "triton-http", "triton-grpc")


@dataclass
class Served:
    target: str
    backend: str
    protocol: str
    engine: str
    url: str
    pid: int | None
    make_client: Callable[[], object]
    snapshot: Callable[[], dict | None] = lambda: None
    delta: Callable[[dict | None, dict | None], dict | None] = lambda a, b: None
    startup_s: float | None = None
    extra: dict = field(default_factory=dict)


# --- servelab service /metrics --------------------------------------------------------------------

def service_metrics(url: str) -> dict:
    """The servelab service's own counters, parsed with prometheus-client's parser."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(url.rstrip("/") + "/metrics", timeout=10).text
    out = {"requests": {}, "images": 0.0, "batch_buckets": {}, "batch_sum": 0.0, "batch_count": 0.0, "rejections": {}}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == "servelab_requests_total":
                out["requests"][f"{s.labels['endpoint']} {s.labels['status']}"] = s.value
            elif s.name == "servelab_images_total":
                out["images"] = s.value
            elif s.name == "servelab_batch_size_bucket":
                out["batch_buckets"][s.labels["le"]] = s.value
            elif s.name == "servelab_batch_size_sum":
                out["batch_sum"] = s.value
            elif s.name == "servelab_batch_size_count":
                out["batch_count"] = s.value
            elif s.name == "servelab_rejections_total":
                out["rejections"][s.labels["reason"]] = s.value
    return out


def service_delta(a: dict | None, b: dict | None) -> dict | None:
    """Before/after difference of service_metrics: requests by endpoint+status, executions, average batch, histogram."""
    if not a or not b:
        return None
    reqs = {k: int(v - a["requests"].get(k, 0)) for k, v in b["requests"].items() if v - a["requests"].get(k, 0)}
    execs = int(b["batch_count"] - a["batch_count"])
    hist, prev = {}, 0
    for le in sorted(b["batch_buckets"], key=lambda x: float("inf") if x == "+Inf" else float(x)):
        cum = int(b["batch_buckets"][le] - a["batch_buckets"].get(le, 0))
        if cum - prev:
            hist[f"<={le}"] = cum - prev
        prev = cum
    return {
        "source": "servelab /metrics",
        "requests": reqs,
        "requests_ok": sum(v for k, v in reqs.items() if k.endswith(" 200")),
        "images": int(b["images"] - a["images"]),
        "executions": execs,
        "avg_batch": round((b["batch_sum"] - a["batch_sum"]) / execs, 3) if execs else None,
        "batch_histogram": hist,
        "rejections": {k: int(v - a["rejections"].get(k, 0)) for k, v in b["rejections"].items()
                       if v - a["rejections"].get(k, 0)},
    }


@contextlib.contextmanager
def serve_fastapi(engine: str = "onnx", *, payload: str = "tensor", max_batch: int = 16, max_delay_ms: float = 2.0,
                  max_queue: int = 512, threads: int = 0, log_path: Path | None = None, env: dict | None = None):
    from servelab.client import InferenceClient
    from servelab.service.process import ServiceProcess

    env = {"SERVELAB_ENGINE": engine, "SERVELAB_MAX_BATCH": max_batch, "SERVELAB_MAX_DELAY_MS": max_delay_ms,
           "SERVELAB_MAX_QUEUE": max_queue, "SERVELAB_THREADS": threads, **(env or {})}
    t0 = time.perf_counter()
    with ServiceProcess(env=env, log_path=log_path) as svc:
        startup = time.perf_counter() - t0
        yield Served(
            target="fastapi", backend="fastapi", protocol="http", engine=engine, url=svc.url, pid=svc.proc.pid,
            make_client=lambda: InferenceClient(mode="remote", backend="fastapi", url=svc.url, payload=payload),
            snapshot=lambda: service_metrics(svc.url), delta=service_delta, startup_s=startup,
            extra={"max_batch": max_batch, "max_delay_ms": max_delay_ms, "max_queue": max_queue},
        )


@contextlib.contextmanager
def serve_litserve(engine: str = "onnx", *, max_batch: int = 16, batch_timeout: float = 0.002,
                   log_path: Path | None = None):
    from servelab.bench.litserve_server import LitServeClient, LitServeProcess

    t0 = time.perf_counter()
    with LitServeProcess(engine=engine, max_batch=max_batch, batch_timeout=batch_timeout, log_path=log_path) as srv:
        yield Served(
            target="litserve", backend="litserve", protocol="http", engine=engine, url=srv.url, pid=srv.pid,
            make_client=lambda: LitServeClient(srv.url), startup_s=time.perf_counter() - t0,
            extra={"max_batch": max_batch, "batch_timeout_s": batch_timeout},
        )


def served(target: str, engine: str = "onnx", **kwargs):
    """Start `target` for a measurement (see module docstring); a context manager yielding Served."""
    if target == "fastapi":
        return serve_fastapi(engine, **kwargs)
    if target == "litserve":
        kwargs.pop("payload", None)
        return serve_litserve(engine, **kwargs)
    if target in ("triton-http", "triton-grpc"):
        from servelab.bench.triton_targets import serve_triton

        return serve_triton(protocol=target.split("-")[1], **kwargs)
    raise ValueError(f"target must be one of {', '.join(TARGETS)}, got {target!r}")
