"""Experiments: each answers one question against servers that are already running, and writes records.

Every experiment takes a `Run` (results/<run-id>/), one or more server handles (servelab.bench.servers) and
`opts` (a LoadOpts: how a point is measured), and returns the records it wrote (`records_frame(records)` makes a
DataFrame). No experiment starts a server, except `cold_start`, whose subject is starting one. Ratios are
measured as interleaved A/B windows (`ab`, servelab.bench.experiments.interleaved), so drift on a shared machine
cancels. Pass/fail goals: servelab.bench.results.goals; tables and sentences: servelab.bench.report.

    from servelab.bench import experiments as ex
    ex.measure(run, "service", srv, batch=1, concurrency=4, opts=opts)
    ex.ab(run, "payload", ex.Side("jpeg", a), ex.Side("tensor", b), opts=opts)

Besides the core experiments re-exported here, each a module of its own: overload (the knee under rising load),
monitoring (Prometheus beside a stepped load), gpu_reference (the GPU node's reference stages), device_fit (an
emulated device fitted to measured batches) and emulated_lesson (the emulated accelerator's lesson).
"""

from servelab.bench.experiments.course import peer_baseline, service, triton
from servelab.bench.experiments.interleaved import ABResult, Side, ab, instances_ab, queue_delays_ab
from servelab.bench.experiments.point import already_measured, measure, merge_deltas, unavailable
from servelab.bench.experiments.raw import (
    MIN_REPEATS,
    REPEAT_BUDGET_S,
    ort_profile,
    raw_engines,
    serialisation,
    serialisation_costs,
)
from servelab.bench.experiments.sweeps import (
    batch_sweep,
    cold_start,
    compare_servers,
    concurrency_sweep,
    http_vs_grpc,
    instance_scaling,
    payload,
    queue_delay_grid,
    rate_sweep,
    served_vs_raw,
)

__all__ = [
    "measure", "ab", "Side", "ABResult", "already_measured", "merge_deltas", "unavailable",
    "MIN_REPEATS", "REPEAT_BUDGET_S",
    "raw_engines", "serialisation", "serialisation_costs", "ort_profile", "batch_sweep", "concurrency_sweep",
    "rate_sweep", "payload", "http_vs_grpc", "queue_delay_grid", "queue_delays_ab", "instance_scaling",
    "instances_ab", "served_vs_raw", "compare_servers", "cold_start", "service", "triton", "peer_baseline",
]
