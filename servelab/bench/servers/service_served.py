"""Handles on servelab's FastAPI service and on LitServe, and the service's own counters (its Prometheus /metrics).
"""

from __future__ import annotations

from dataclasses import dataclass

from servelab.bench.servers.handle import Served


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


@dataclass
class ServiceServed(Served):
    def make_client(self):
        from servelab.client import InferenceClient

        return InferenceClient(mode="remote", backend="fastapi", url=self.url, payload=self.payload)

    def snapshot(self) -> dict | None:
        return service_metrics(self.url)

    def delta(self, before, after):
        return service_delta(before, after)


@dataclass
class LitServed(Served):
    def make_client(self):
        from servelab.bench.servers.litserve_server import LitServeClient

        return LitServeClient(self.url)


def service_engine(url: str) -> str | None:
    import httpx

    try:
        engine = httpx.get(url.rstrip("/") + "/info", timeout=10).json().get("engine")
        return engine.get("engine") if isinstance(engine, dict) else engine
    except (httpx.HTTPError, ValueError, AttributeError):
        return None
