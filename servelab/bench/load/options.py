"""How one point is measured (`LoadOpts`, with `LoadOpts.smoke()` for a run whose numbers are not results) and
what a loop returns (`LoadResult`, whose `summary()` is the record's measured fields).

    opts = LoadOpts(min_requests=20, min_p50s=10, tolerance=0.1, max_windows=8)
    closed_loop(factory, 4, opts).summary()["throughput_img_s"]
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import numpy as np

from servelab.bench.load.stats import latency_summary, relative_spread

Work = Callable[[], int]

# a GPU answers in milliseconds: windows of 2 s already hold hundreds of requests (the lab's gpu profile and the
# GPU reference measure with it: LoadOpts(**GPU_LOAD))
GPU_LOAD = {"min_requests": 100, "min_p50s": 10.0, "min_window_s": 2.0, "max_windows": 5, "tolerance": 0.1,
            "quick": False}


@dataclass(frozen=True)
class LoadOpts:
    """How one point is measured. The defaults produce results; `LoadOpts.smoke()` checks that things run."""

    min_requests: int = 20       # completions per window
    min_p50s: float = 10.0       # a window lasts at least this many p50 latencies
    min_window_s: float = 0.0    # and at least this long
    max_window_s: float = 120.0  # cap on one window (a stalled server)
    warmup_s: float = 0.0        # least warm-up; it lasts until the queue is steady anyway
    max_warmup_s: float = 60.0
    tolerance: float = 0.1       # last `stable_windows` windows within ±tolerance of their mean
    stable_windows: int = 3
    max_windows: int = 8
    # an interleaved A/B measures at most this many window pairs (None: max_windows). A smoke run's single pair
    # checks every path of the comparison without the second pair's model reloads and warm-ups
    max_pairs: int | None = None
    # an interleaved A/B also stops once two or more pairs give its verdict (servelab.bench.load.stats.ratio_decided)
    stop_when_decided: bool = True
    quick: bool = False          # a smoke run: its numbers are not results
    progress: bool = False

    @classmethod
    def smoke(cls, **kw) -> LoadOpts:
        """Seconds per point: tiny windows and a loose tolerance. Numbers measured with it are not results."""
        return cls(**{"min_requests": 1, "min_p50s": 1.0, "max_windows": 3, "tolerance": 0.5, "max_warmup_s": 10.0,
                      "quick": True, **kw})

    def as_params(self) -> dict:
        return {**asdict(self), "label": "quick" if self.quick else "full"}


@dataclass
class LoadResult:
    mode: str  # closed | open
    concurrency: int | None
    rate_rps: float | None
    latencies_s: np.ndarray
    images: int  # measured (inside the reported windows)
    requests: int
    errors: int
    measured_s: float
    windows: list[dict]  # the reported windows (the last `stable_windows` when stable)
    windows_used: int    # every measured window
    stable: bool
    sent_total: int  # every request sent, warm-up included (matches a server's own counters)
    ok_total: int
    images_total: int
    error_examples: list[str] = field(default_factory=list)
    warmup_s: float | None = None
    quick: bool = False
    meters: dict = field(default_factory=dict)
    # open loop only
    offered: int | None = None
    late_starts: int | None = None
    dropped: int | None = None
    backlog: int | None = None
    backlog_by_window: list[int] | None = None
    service_latencies_s: np.ndarray | None = None

    @property
    def throughput_img_s(self) -> float:
        return self.images / self.measured_s if self.measured_s > 0 else 0.0

    @property
    def request_rate_rps(self) -> float:
        return self.requests / self.measured_s if self.measured_s > 0 else 0.0

    @property
    def rate_held(self) -> bool | None:
        if self.mode != "open":
            return None
        return self.dropped == 0 and self.backlog <= max(2, 0.02 * (self.offered or 0))

    def summary(self) -> dict:
        """The record fields this run measured (latency in ms, throughput in images/s, window min–max)."""
        thr = [w["throughput_img_s"] for w in self.windows]
        p50 = [w["latency_p50_ms"] for w in self.windows if w["latency_p50_ms"] is not None]
        out = {
            **latency_summary(self.latencies_s),
            "throughput_img_s": round(self.throughput_img_s, 4),
            "throughput_min_img_s": round(min(thr), 4) if thr else None,
            "throughput_max_img_s": round(max(thr), 4) if thr else None,
            "latency_p50_min_ms": round(min(p50), 4) if p50 else None,
            "latency_p50_max_ms": round(max(p50), 4) if p50 else None,
            "request_rate_rps": round(self.request_rate_rps, 4),
            "requests": self.requests,
            "images": self.images,
            "errors": self.errors,
            "error_examples": self.error_examples[:3],
            "measured_s": round(self.measured_s, 3),
            "warmup_measured_s": None if self.warmup_s is None else round(self.warmup_s, 3),
            "windows_used": self.windows_used,
            "repeats": len(self.windows),
            "stable": self.stable,
            "quick": self.quick,
            "spread": None if relative_spread(thr) is None else round(relative_spread(thr), 4),
            "window_throughput_img_s": [round(t, 3) for t in thr],
            "window_latency_p50_ms": [round(x, 3) for x in p50],
            "sent_total": self.sent_total,
            "ok_total": self.ok_total,
            **self.meters,
        }
        if self.mode == "open":
            svc = latency_summary(self.service_latencies_s if self.service_latencies_s is not None else [])
            out.update(
                offered=self.offered,
                offered_rate_rps=round(self.offered / self.measured_s, 4) if self.measured_s else None,
                late_starts=self.late_starts,
                dropped=self.dropped,
                backlog=self.backlog,
                backlog_by_window=self.backlog_by_window,
                rate_held=self.rate_held,
                service_latency_p50_ms=svc["latency_p50_ms"],
                service_latency_p99_ms=svc["latency_p99_ms"],
            )
        return out
