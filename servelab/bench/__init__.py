"""Benchmarks, one folder per step of the flow: load → servers → experiments → results → report.

    from servelab.bench import (LoadOpts, served, attach, experiments as ex, Run, records_frame, goals_table,
                                write_report, versus, ratio_sentence)

  load/ (servelab.bench.load): how a point is measured — windows sized by the work, repeated until the last few agree.
    LoadOpts(min_requests=20, min_p50s=10, tolerance=0.1, max_windows=8, …), LoadOpts.smoke() (not results)
    closed_loop(factory, concurrency, opts) -> LoadResult (load.closed);  open_loop(factory, rate_rps, duration_s=…)
    (load.poisson);  Recorder and the windows every loop shares (load.windows);  client_factory / embedder_factory
    (load.workers);  statistics (load.stats);  idle pausing (load.idle: IdleSides, idle_cpu_pct);  CPU meters and
    pinning (load.cpu: CpuMeter, pinned);  drift probes (load.drift);  the request inputs (load.inputs)

  servers/ (servelab.bench.servers): typed handles on running servers — experiments never start one.
    with served("fastapi" | "litserve" | "triton-http" | "triton-grpc" | "in-process", engine=…, …) as srv: …
    srv = attach(server, url, payload=…, model=…, http_url=…, grpc_url=…)   # already running (lab stack, node)
    TritonServed.reconfigure(max_queue_delay_us=…, instances=…) / .configured(…) (restores) / .variant(…)
    with network_link("loopback" | "wan-100mbit-20ms", srv) as link: measure(run, exp, link.over(srv), …)

  experiments/ (servelab.bench.experiments), each `(run, server handle(s), *, …, opts) -> records`:
    measure (experiments.point), ab (experiments.interleaved: the interleaved A/B — its loop, its two sides, its
    records), raw_engines, serialisation, ort_profile (experiments.raw), batch_sweep, concurrency_sweep,
    rate_sweep, payload, http_vs_grpc, queue_delay_grid, instance_scaling, served_vs_raw, compare_servers,
    cold_start (experiments.sweeps), the course benchmarks service, triton, peer_baseline (experiments.course);
    and overload, monitoring, gpu_reference, device_fit, emulated_lesson, a module each.

  results/ (servelab.bench.results): Run(run_id, root), RECORD_SCHEMA, validate_record, load_records,
    records_frame (results.records);  goal_record, service_goals, triton_goals, peer_goals, scaling_efficiency
    (results.goals);  compare(run_a, run_b, min_noise=0.02, min_fraction=0.9) -> Comparison (results.compare);
    reference_line (results.reference: the committed GPU reference runs)

  report/ (servelab.bench.report): band, ratio_reading, apart_reading, margin (report.verdicts: the one reading of
    a comparison);  versus, ratio_sentence, leader, idle_sentence (report.sentences);  write_report, goals_table,
    cost_table, markdown_table (report.tables);  plots (report.plots);  headlines as verdict data (report.headlines, report.findings)

CLI: `servelab bench …` (see `servelab bench --help`): each command starts what it measures in a `with served(…)`.
"""

from servelab.bench.load.closed import closed_loop
from servelab.bench.load.options import LoadOpts, LoadResult
from servelab.bench.load.poisson import open_loop
from servelab.bench.load.workers import client_factory, embedder_factory
from servelab.bench.results.records import (
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

    if name in ("load", "servers", "experiments", "results", "report"):
        return importlib.import_module(f"servelab.bench.{name}")
    if name in ("interleaved", "ABResult"):
        return getattr(importlib.import_module("servelab.bench.experiments.interleaved"), name)
    if name in ("served", "attach"):
        return getattr(importlib.import_module("servelab.bench.servers.lifecycle"), name)
    if name in ("write_report", "goals_table", "cost_table"):
        return getattr(importlib.import_module("servelab.bench.report.tables"), name)
    if name in ("versus", "ratio_sentence", "leader"):
        return getattr(importlib.import_module("servelab.bench.report.sentences"), name)
    if name == "band":
        return importlib.import_module("servelab.bench.report.verdicts").band
    if name == "compare":
        return importlib.import_module("servelab.bench.results.compare").compare
    raise AttributeError(name)
