"""Benchmarks, in the order a measurement flows: load generation → experiments → records → goals → report.

    from servelab.bench import (LoadOpts, served, attach, experiments as ex, Run, records_frame, goals_table,
                                write_report, versus, ratio_sentence)

  Servers (servelab.bench.servers): typed handles on running servers — experiments never start one.
    with served("fastapi" | "litserve" | "triton-http" | "triton-grpc" | "in-process", engine=…, …) as srv: …
    srv = attach(server, url, payload=…, model=…, http_url=…, grpc_url=…)   # already running (lab stack, node)
    TritonServed.reconfigure(max_queue_delay_us=…, instances=…) / .configured(…) (restores) / .variant(…)

  Load generation (servelab.bench.loadgen): windows sized by the work, repeated until the last few agree.
    LoadOpts(min_requests=20, min_p50s=10, tolerance=0.1, max_windows=8, …), LoadOpts.smoke() (not results)
    closed_loop(factory, concurrency, opts) -> LoadResult;  interleaved(factory_a, factory_b, c, opts) -> ABResult
    open_loop(factory, rate_rps, duration_s=…) -> LoadResult;  Recorder (the one sample store)

  Experiments (servelab.bench.experiments), each `(run, server handle(s), *, …, opts) -> records`:
    measure, ab (interleaved A/B: A, B and a `ratio` record), raw_engines, batch_sweep, concurrency_sweep,
    rate_sweep, serialisation, payload (jpeg ÷ tensor), http_vs_grpc (grpc ÷ http), queue_delay_grid,
    instance_scaling, served_vs_raw, compare_servers (a ÷ b), cold_start, ort_profile,
    and the course benchmarks service, triton, peer_baseline.

  Records (servelab.bench.records): Run(run_id, root), RECORD_SCHEMA, validate_record, load_records, records_frame
  Goals (servelab.bench.goals): goal_record, service_goals, triton_goals, peer_goals, scaling_efficiency
  Report (servelab.bench.report): write_report, goals_table, cost_table, settling_rows, markdown_table,
    band(x, metric), versus(name_a, a, name_b, b, metric=…, unit=…), ratio_sentence(rec), leader({name: rec})
  Two runs (servelab.bench.compare): compare(run_a, run_b, min_noise=0.02, min_fraction=0.9) -> Comparison
    (points within noise, headline claims from each run's headlines.json — servelab.bench.headlines)
  Beside a measurement: the client-server link (servelab.bench.link) and CPU (servelab.bench.cpu)
    with network_link("loopback" | "wan-100mbit-20ms", srv) as link: measure(run, exp, link.over(srv), …)
    meters=[CpuMeter(server_pid=srv.pid, link_pid=link.pid)]   # load-generator / client / server / link CPU %
    with pinned(server_pid): …   # client and server on separate cores where the OS allows
    ab(…) stops the waiting server of two during the other's windows and records each one's idle CPU
    (servelab.bench.idle: IdleSides, idle_cpu_pct)

CLI: `servelab bench …` (see `servelab bench --help`): each command starts what it measures in a `with served(…)`.
"""

from servelab.bench.loadgen import (
    LoadOpts,
    LoadResult,
    client_factory,
    closed_loop,
    embedder_factory,
    interleaved,
    open_loop,
)
from servelab.bench.records import (
    RECORD_SCHEMA,
    Run,
    environment_fingerprint,
    load_records,
    make_record,
    memory_snapshot,
    records_frame,
    validate_record,
)

__all__ = [
    "LoadOpts", "LoadResult", "closed_loop", "interleaved", "open_loop", "client_factory", "embedder_factory",
    "RECORD_SCHEMA", "Run", "environment_fingerprint", "load_records", "make_record", "memory_snapshot",
    "records_frame", "validate_record", "served", "attach", "experiments", "goals_table", "write_report", "compare",
    "cost_table", "versus", "ratio_sentence", "leader", "band",
]


def __getattr__(name):  # heavy modules load on first use
    import importlib

    if name in ("experiments", "report", "servers", "goals", "stats", "inputs"):
        return importlib.import_module(f"servelab.bench.{name}")
    if name in ("served", "attach"):
        return getattr(importlib.import_module("servelab.bench.servers"), name)
    if name in ("write_report", "goals_table", "cost_table", "versus", "ratio_sentence", "leader", "band"):
        return getattr(importlib.import_module("servelab.bench.report"), name)
    if name == "compare":
        return importlib.import_module("servelab.bench.compare").compare
    raise AttributeError(name)
