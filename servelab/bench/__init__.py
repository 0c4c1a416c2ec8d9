"""Benchmarks: load generators, experiments, result records, tables and plots.

Public API (everything takes keyword parameters; experiments return the list of records they wrote —
`records_frame(records)` turns them into a pandas DataFrame):

    from servelab.bench import (Run, LoadOpts, closed_loop, open_loop, client_factory, embedder_factory,
                                experiments as ex, records_frame, load_records, write_report, compare, cost_table)

    run = Run(run_id=None, root=None, name="bench")   # results/<run-id>/ (SERVELAB_RESULTS overrides results/)
    run.dir, run.records, run.environment, run.dataframe(experiment=None)

  Load generators (servelab.bench.loadgen) — factory(i) -> work() (or (work, close)); work() sends one
  request and returns its image count; give each worker its own InferenceClient:
    closed_loop(factory, concurrency, warmup_s=1, window_s=2, max_windows=10, tolerance=0.1, requests=None,
                min_window_requests=5, progress=True) -> LoadResult
    open_loop(factory, rate_rps, duration_s=5, warmup_s=1, max_workers=32, seed=0, drop_after_s=None)
                -> LoadResult (offered, late_starts, dropped, backlog, backlog_by_window, rate_held)
    client_factory(make_client, blobs=[jpeg bytes] | tensor=arr), embedder_factory(embedder, batch)
    LoadResult.summary() -> the record fields (latency_p50/p95/p99_ms, throughput_img_s, errors, stable, ...)

  Experiments (servelab.bench.experiments; each `run=Run|run-id|None, quick=False, opts=LoadOpts|None,
  window_s=None`):
    service(engines=("torch","onnx","onnx-int8"), served_engines=None, raw_batches=(1,16), concurrencies=(1,16),
            payload="tensor")                                   # issue 2 figures + targets
    triton(concurrency=16, protocols=("http","grpc"), payloads=("tensor","jpeg"), offline_batch=16)  # issue 3
    engines(engines, providers=("cpu","cuda","tensorrt"), batches=(1,8,16,32))   # unavailable -> record says so
    batch_sweep(target="in-process"|"fastapi"|..., engine="onnx", batches=(1,2,4,8,16,32))
    concurrency_sweep(target="fastapi"|"litserve"|"triton-http"|"triton-grpc", concurrencies=(1,...,128), batch=1)
    rate_sweep(target, rates=(5,10,20,40), duration_s=10)      # open loop
    payload(targets=("fastapi","triton-http"), batch=1, concurrency=4)   # JSON lists vs binary vs JPEG
    http_vs_grpc(concurrencies=(1,16), payload="tensor")
    queue_delay_grid(delays_us=(0,1000,4000,16000), concurrencies=(1,4,16), protocol="grpc")  # reloads model
    instance_scaling(counts=(1,2,3,4), concurrency=16, protocol="grpc")
    cold_start(targets=("fastapi","litserve","triton-http"), engine="onnx", repeats=1)
    ort_profile(engine="onnx", provider="cpu", batch=8, iterations=5)
    peer_baseline(targets=("fastapi","litserve","triton-http"), concurrencies=(1,16), payload="jpeg")
    serialisation_costs(batch=1) -> rows (no records); targets_table(records); cost_table(records, price_per_hour)

  Records and outputs (servelab.bench.records / servelab.bench.report):
    RECORD_SCHEMA, validate_record(rec), make_record(...), environment_fingerprint(), memory_snapshot(pid)
    load_records(run_id_or_dir), records_frame(records)
    write_report(run, price_per_hour=None) -> tables/*.csv|md + plots/*.png
    compare(run_a, run_b, min_noise=0.02, min_fraction=0.9) -> Comparison (servelab.bench.compare): points within
      noise, headline claims the same, .reproduced

CLI: `servelab bench service|triton|engines|batch-sweep|concurrency-sweep|rate-sweep|payload|http-grpc|
queue-delay|instances|cold-start|ort-profile|peer|report|cost|compare` (see `servelab bench --help`).
"""

from servelab.bench.loadgen import LoadResult, client_factory, closed_loop, embedder_factory, open_loop
from servelab.bench.records import (RECORD_SCHEMA, Run, environment_fingerprint, load_records, make_record,
                                    memory_snapshot, records_frame, validate_record)

__all__ = [
    "LoadResult", "closed_loop", "open_loop", "client_factory", "embedder_factory", "RECORD_SCHEMA", "Run",
    "environment_fingerprint", "load_records", "make_record", "memory_snapshot", "records_frame", "validate_record",
    "LoadOpts", "experiments", "write_report", "compare", "cost_table",
]


def __getattr__(name):  # heavy modules load on first use
    import importlib

    if name in ("experiments", "report", "targets", "triton_targets", "stats"):
        return importlib.import_module(f"servelab.bench.{name}")
    if name in ("LoadOpts", "cost_table"):
        return getattr(importlib.import_module("servelab.bench.experiments"), name)
    if name == "write_report":
        return getattr(importlib.import_module("servelab.bench.report"), name)
    if name == "compare":
        return importlib.import_module("servelab.bench.compare").compare
    raise AttributeError(name)
