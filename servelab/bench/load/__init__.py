"""How a point is measured: closed and open loops, the load options, idle pausing, CPU meters and pinning, drift
probes, the request inputs and the statistics of a measurement (the interleaved A/B: servelab.bench.experiments.interleaved).

    opts = LoadOpts(min_requests=20, min_p50s=10, tolerance=0.1, max_windows=8)   # LoadOpts.smoke(): not results
    closed_loop(client_factory(make_client, tensor=sample_tensor(1)), 4, opts) -> LoadResult
    open_loop(factory, rate_rps=20, duration_s=10) -> LoadResult
"""

from servelab.bench.load.closed import closed_loop
from servelab.bench.load.cpu import NOT_PINNED, CpuMeter, current_pinning, pinned, plan_cores
from servelab.bench.load.drift import DriftProbe, describe, machine_speed, probe_values
from servelab.bench.load.idle import IdleSides, idle_cpu_pct, stoppable_group
from servelab.bench.load.inputs import payload_bytes, sample_jpegs, sample_tensor
from servelab.bench.load.options import LoadOpts, LoadResult, Work
from servelab.bench.load.poisson import open_loop, poisson_schedule
from servelab.bench.load.stats import (
    MIN_PAIRS_DIRECTION,
    PERCENTILES,
    RATIO_MARGIN,
    is_stable,
    latency_summary,
    ratio_decided,
    relative_spread,
)
from servelab.bench.load.windows import Recorder
from servelab.bench.load.workers import client_factory, embedder_factory

__all__ = [
    "LoadOpts", "LoadResult", "Work", "closed_loop", "open_loop", "poisson_schedule", "client_factory",
    "embedder_factory", "Recorder", "NOT_PINNED", "CpuMeter", "current_pinning", "pinned", "plan_cores",
    "DriftProbe", "describe", "machine_speed", "probe_values", "IdleSides", "idle_cpu_pct", "stoppable_group",
    "payload_bytes", "sample_jpegs", "sample_tensor", "MIN_PAIRS_DIRECTION", "PERCENTILES", "RATIO_MARGIN",
    "is_stable", "latency_summary", "ratio_decided", "relative_spread",
]
