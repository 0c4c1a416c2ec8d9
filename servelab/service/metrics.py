"""The service's Prometheus metrics, in a registry of its own (one per app, so tests can run several).

    metrics = Metrics()                       # one process: its own counters
    metrics = Metrics(shared_dir=run_folder)  # a worker of several: one scrape of any of them covers them all

Requests are labelled by route template (`/embed`, `/embed/tensor`), never by raw path: a scanner probing
a thousand made-up URLs adds one `unmatched` series, not a thousand.

With several workers (`servelab serve --workers N`) every worker writes its metrics into files of the run's own
folder (prometheus-client's multiprocess mode, which each worker switches on before its app is built:
servelab.service.launch), and whichever worker answers `/metrics` reads them all: the counters and histograms are
the sums over the workers. The gauges stay per worker, since each worker's admission gate and queue are its own
(its limits hold per worker): one series per live worker, labelled `pid`, refreshed every `GAUGE_REFRESH_S` by each
worker; sum them for the whole service.
"""

from __future__ import annotations

import os
from pathlib import Path

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from servelab.errors import CannotRun

UNMATCHED = "unmatched"
GAUGE_REFRESH_S = 0.25  # how often a worker of several writes its gauges (a scrape reaches only one worker)


class Metrics:
    def __init__(self, shared_dir: Path | None = None):
        if shared_dir is not None:
            from prometheus_client import values

            if values.ValueClass is values.MutexValue:  # the values would be this process's alone
                raise CannotRun("metrics shared between workers need prometheus-client's multiprocess mode, "
                                "switched on in each worker before its app is built (servelab.service.launch)")
        self.shared_dir = shared_dir
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
        # per worker where there are several: each worker's own queue and gate ("liveall": one series per live pid)
        self.queue = Gauge("servelab_queue_depth", "Images waiting for the engine (per worker)", registry=r,
                           multiprocess_mode="liveall")
        self.in_flight = Gauge("servelab_in_flight", "Requests admitted and not yet answered (per worker)", registry=r,
                               multiprocess_mode="liveall")
        self.rejections = Counter("servelab_rejections", "Requests refused, by reason", ["reason"], registry=r)
        self._scraped = r
        self._children: dict[tuple[str, int, bool], tuple] = {}
        if shared_dir is not None:
            from prometheus_client import multiprocess

            self._scraped = CollectorRegistry()
            multiprocess.MultiProcessCollector(self._scraped, path=str(shared_dir))

    def answered(self, endpoint: str, status: int, seconds: float | None) -> None:
        """One request answered: counted by route template and status, and its latency where it is timed (the
        embedding routes; None: not timed)."""
        key = (endpoint, status, seconds is not None)
        children = self._children.get(key)
        if children is None:  # each label set's series looked up once, not per request (a lock and a validation)
            children = self._children[key] = (self.requests.labels(endpoint, str(status)),
                                               self.latency.labels(endpoint) if seconds is not None else None)
        if children[1] is not None:
            children[1].observe(seconds)
        children[0].inc()

    def exposition(self) -> tuple[bytes, str]:
        """What /metrics answers: this process's metrics, or with several workers all of theirs."""
        return generate_latest(self._scraped), CONTENT_TYPE_LATEST

    def process_gone(self) -> None:
        """A worker of several stopping: its gauges leave the scrape (its counts stay in the sums)."""
        if self.shared_dir is not None:
            from prometheus_client import multiprocess

            multiprocess.mark_process_dead(os.getpid(), path=str(self.shared_dir))
