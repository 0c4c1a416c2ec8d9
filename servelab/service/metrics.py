"""The service's Prometheus metrics, in a registry of its own (one per app, so tests can run several).

Requests are labelled by route template (`/embed`, `/embed/tensor`), never by raw path: a scanner probing
a thousand made-up URLs adds one `unmatched` series, not a thousand.
"""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

UNMATCHED = "unmatched"


class Metrics:
    def __init__(self):
        self.registry = r = CollectorRegistry()
        self.requests = Counter("servelab_requests", "HTTP requests by route template and status",
                                ["endpoint", "status"], registry=r)
        self.latency = Histogram(
            "servelab_request_latency_seconds", "Embedding request latency by route template", ["endpoint"], registry=r,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 10, 30),
        )
        self.batch = Histogram("servelab_batch_size", "Images per engine call", registry=r,
                               buckets=(1, 2, 4, 8, 12, 16, 24, 32, 64))
        self.images = Counter("servelab_images", "Images embedded", registry=r)
        self.queue = Gauge("servelab_queue_depth", "Images waiting for the engine", registry=r)
        self.in_flight = Gauge("servelab_in_flight", "Requests admitted and not yet answered", registry=r)
        self.rejections = Counter("servelab_rejections", "Requests refused, by reason", ["reason"], registry=r)

    def exposition(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
