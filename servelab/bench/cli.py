"""`servelab bench …` commands: each runs a named experiment into results/<run-id>/ and prints its table.

Common options: --quick (seconds-long smoke run; its numbers are not results), --window-s (measurement window),
--run-id (append to an existing run), --price-per-hour (adds a cost table).
"""

from __future__ import annotations

from typing import Optional

import typer

app = typer.Typer(no_args_is_help=True)

QUICK = typer.Option(False, "--quick", help="smoke run in seconds (tiny windows; numbers are not results)")
WINDOW = typer.Option(None, "--window-s", help="measurement window in seconds (default 3; quick 0.6)")
RUN_ID = typer.Option(None, "--run-id", help="run id under results/ (default: new, timestamped)")
PRICE = typer.Option(None, "--price-per-hour", help="machine price per hour: adds a cost-per-1,000-images table")
ENGINE = typer.Option("onnx", help="engine: torch | onnx | onnx-int8")


def _ints(text: str) -> tuple:
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ValueError(f"expected a comma-separated list of integers, got {text!r}") from None


def _strs(text: str) -> tuple:
    return tuple(x.strip() for x in text.split(",") if x.strip())


def _finish(run, records, price_per_hour=None, columns=None) -> None:
    from servelab.bench.experiments import targets_table
    from servelab.bench.report import COLUMNS, flat_rows, markdown_table, write_report

    paths = write_report(run, price_per_hour)
    rows = [r for r in flat_rows(records) if r["kind"] != "derived"]
    cols = columns or [c for c in COLUMNS if c not in ("experiment", "value", "threshold", "met")
                       and any(r.get(c) not in (None, "") for r in rows)]
    typer.echo(markdown_table(rows, cols))
    t = targets_table(records)
    if t:
        typer.echo("Targets:")
        typer.echo(markdown_table(t))
    unavailable = [r for r in records if r.get("kind") == "unavailable"]
    for r in unavailable:
        typer.echo(f"not available: {r['target']} {r.get('engine') or ''} {r.get('provider') or ''}: {r.get('note')}")
    typer.echo(f"weights: {run.weights}")
    typer.echo(f"run {run.run_id}: {run.dir / 'records.jsonl'} ({len(run.records)} records; "
               f"{len(paths)} tables/plots under {run.dir})")


def _new_run(run_id, name):
    from servelab.bench.records import Run

    return Run(run_id=run_id, name=name)


@app.command()
def service(
    quick: bool = QUICK, window_s: Optional[float] = WINDOW, run_id: Optional[str] = RUN_ID,
    engines: str = typer.Option("torch,onnx,onnx-int8", help="engines measured raw (in-process)"),
    served_engines: Optional[str] = typer.Option(None, help="engines served (default: all; quick: onnx)"),
    payload: str = typer.Option("tensor", help="served payload: tensor | jpeg"),
    threads: int = typer.Option(0, help="engine threads (0 = all cores)"),
    price_per_hour: Optional[float] = PRICE,
):
    """Issue 2: raw engines at batch 1/16 vs the served service at c=1/16, with the targets met / not met."""
    from servelab.bench import experiments as ex

    run = _new_run(run_id, "service")
    recs = ex.service(run, engines=_strs(engines), served_engines=_strs(served_engines) if served_engines else None,
                      payload=payload, threads=threads, quick=quick, window_s=window_s)
    _finish(run, recs, price_per_hour)


@app.command()
def triton(
    quick: bool = QUICK, window_s: Optional[float] = WINDOW, run_id: Optional[str] = RUN_ID,
    concurrency: int = typer.Option(16, help="concurrency of the batch-1 served measurements"),
    price_per_hour: Optional[float] = PRICE,
):
    """Issue 3: offline batch-16 vs Triton batch-1 at c=16, HTTP vs gRPC, tensor vs JPEG payload."""
    from servelab.bench import experiments as ex

    run = _new_run(run_id, "triton")
    recs = ex.triton(run, concurrency=concurrency, quick=quick, window_s=window_s)
    _finish(run, recs, price_per_hour)


@app.command()
def engines(
    quick: bool = QUICK, window_s: Optional[float] = WINDOW, run_id: Optional[str] = RUN_ID,
    engines: str = typer.Option("torch,onnx,onnx-int8"), providers: str = typer.Option("cpu,cuda,tensorrt"),
    batches: str = typer.Option("1,8,16,32"), threads: int = typer.Option(0), price_per_hour: Optional[float] = PRICE,
):
    """Raw in-process throughput per engine / provider / batch (unavailable providers are recorded as such)."""
    from servelab.bench import experiments as ex

    run = _new_run(run_id, "engines")
    recs = ex.engines(run, engines=_strs(engines), providers=_strs(providers), batches=_ints(batches),
                      threads=threads, quick=quick, window_s=window_s)
    _finish(run, recs, price_per_hour)


@app.command("batch-sweep")
def batch_sweep(
    quick: bool = QUICK, window_s: Optional[float] = WINDOW, run_id: Optional[str] = RUN_ID,
    target: str = typer.Option("in-process", help="in-process | fastapi | litserve | triton-http | triton-grpc"),
    engine: str = ENGINE, batches: str = typer.Option("1,2,4,8,16,32"), payload: str = typer.Option("tensor"),
    price_per_hour: Optional[float] = PRICE,
):
    """Throughput and latency against batch size."""
    from servelab.bench import experiments as ex

    run = _new_run(run_id, "batch-sweep")
    recs = ex.batch_sweep(run, target=target, engine=engine, batches=_ints(batches), payload=payload, quick=quick,
                          window_s=window_s)
    _finish(run, recs, price_per_hour)


@app.command("concurrency-sweep")
def concurrency_sweep(
    quick: bool = QUICK, window_s: Optional[float] = WINDOW, run_id: Optional[str] = RUN_ID,
    target: str = typer.Option("fastapi", help="fastapi | litserve | triton-http | triton-grpc"),
    engine: str = ENGINE, concurrencies: str = typer.Option("1,2,4,8,16,32,64,128"),
    payload: str = typer.Option("tensor"), price_per_hour: Optional[float] = PRICE,
):
    """Closed-loop concurrency sweep with batch-1 requests (server-side batching curve)."""
    from servelab.bench import experiments as ex

    run = _new_run(run_id, "concurrency-sweep")
    recs = ex.concurrency_sweep(run, target=target, engine=engine, concurrencies=_ints(concurrencies),
                                payload=payload, quick=quick, window_s=window_s)
    _finish(run, recs, price_per_hour)


@app.command("rate-sweep")
def rate_sweep(
    quick: bool = QUICK, run_id: Optional[str] = RUN_ID, target: str = typer.Option("fastapi"), engine: str = ENGINE,
    rates: str = typer.Option("5,10,20,40", help="arrival rates (requests/s)"),
    duration_s: float = typer.Option(10.0), payload: str = typer.Option("tensor"),
    max_workers: int = typer.Option(64, help="client workers (most requests in flight)"),
    drop_after_s: Optional[float] = typer.Option(None, help="drop (and count) arrivals not started within this"),
    seed: int = typer.Option(0, help="arrival schedule seed"),
):
    """Open-loop Poisson arrivals: latency from arrival, late starts, drops and backlog per rate."""
    from servelab.bench import experiments as ex

    run = _new_run(run_id, "rate-sweep")
    recs = ex.rate_sweep(run, target=target, engine=engine, rates=tuple(float(x) for x in _strs(rates)),
                         duration_s=duration_s, payload=payload, max_workers=max_workers, drop_after_s=drop_after_s,
                         seed=seed, quick=quick)
    _finish(run, recs)


@app.command()
def payload(
    quick: bool = QUICK, window_s: Optional[float] = WINDOW, run_id: Optional[str] = RUN_ID,
    targets: str = typer.Option("fastapi,triton-http"), engine: str = ENGINE, concurrency: int = typer.Option(4),
):
    """JSON lists vs binary tensor vs JPEG: client serialisation time and bytes, then request throughput."""
    from servelab.bench import experiments as ex

    run = _new_run(run_id, "payload")
    recs = ex.payload(run, targets=_strs(targets), engine=engine, concurrency=concurrency, quick=quick,
                      window_s=window_s)
    _finish(run, recs)


@app.command("http-grpc")
def http_grpc(
    quick: bool = QUICK, window_s: Optional[float] = WINDOW, run_id: Optional[str] = RUN_ID,
    concurrencies: str = typer.Option("1,16"), payload: str = typer.Option("tensor"),
):
    """Triton over HTTP vs gRPC, same model and payload."""
    from servelab.bench import experiments as ex

    run = _new_run(run_id, "http-grpc")
    recs = ex.http_vs_grpc(run, concurrencies=_ints(concurrencies), payload=payload, quick=quick, window_s=window_s)
    _finish(run, recs)


@app.command("queue-delay")
def queue_delay(
    quick: bool = QUICK, window_s: Optional[float] = WINDOW, run_id: Optional[str] = RUN_ID,
    delays_us: str = typer.Option("0,1000,4000,16000", help="dynamic-batching max queue delays (µs)"),
    concurrencies: str = typer.Option("1,4,16"), protocol: str = typer.Option("grpc"),
):
    """Triton dynamic-batching queue delay × concurrency grid (the model is reloaded between delays)."""
    from servelab.bench import experiments as ex

    run = _new_run(run_id, "queue-delay")
    recs = ex.queue_delay_grid(run, delays_us=_ints(delays_us), concurrencies=_ints(concurrencies),
                               protocol=protocol, quick=quick, window_s=window_s)
    _finish(run, recs)


@app.command()
def instances(
    quick: bool = QUICK, window_s: Optional[float] = WINDOW, run_id: Optional[str] = RUN_ID,
    counts: str = typer.Option("1,2,3,4", help="instance_group counts"), concurrency: int = typer.Option(16),
    protocol: str = typer.Option("grpc"), price_per_hour: Optional[float] = PRICE,
):
    """Triton instance_group count scaling (the CPU analogue of the multi-GPU study)."""
    from servelab.bench import experiments as ex

    run = _new_run(run_id, "instances")
    recs = ex.instance_scaling(run, counts=_ints(counts), concurrency=concurrency, protocol=protocol, quick=quick,
                               window_s=window_s)
    _finish(run, recs, price_per_hour)


@app.command("cold-start")
def cold_start(
    run_id: Optional[str] = RUN_ID, targets: str = typer.Option("fastapi,litserve,triton-http"), engine: str = ENGINE,
    repeats: int = typer.Option(1),
):
    """Process start to ready, and the first request's latency, per target."""
    from servelab.bench import experiments as ex

    run = _new_run(run_id, "cold-start")
    recs = ex.cold_start(run, targets=_strs(targets), engine=engine, repeats=repeats)
    _finish(run, recs)


@app.command("ort-profile")
def ort_profile(
    quick: bool = QUICK, run_id: Optional[str] = RUN_ID, engine: str = ENGINE,
    provider: str = typer.Option("cpu"), batch: int = typer.Option(8), iterations: int = typer.Option(5),
):
    """ONNX Runtime profile: share of kernel time by op type and the provider that ran each node."""
    from servelab.bench import experiments as ex
    from servelab.bench.report import markdown_table

    run = _new_run(run_id, "ort-profile")
    recs = ex.ort_profile(run, engine=engine, provider=provider, batch=batch, iterations=iterations, quick=quick)
    r = recs[0]
    if r["kind"] == "unavailable":
        typer.echo(f"not available: {r['note']}")
    else:
        rows = [{"op_type": k, "share_pct": round(v * 100, 2), "time_ms": r["op_time_ms"][k]}
                for k, v in r["op_time_share"].items()]
        typer.echo(markdown_table(rows[:15]))
        typer.echo(f"nodes by provider: {r['nodes_by_provider']}; CPU-fallback nodes: {r['n_cpu_fallback_nodes']}")
    _finish(run, recs, columns=["kind", "target", "engine", "provider", "batch", "note"])


@app.command()
def peer(
    quick: bool = QUICK, window_s: Optional[float] = WINDOW, run_id: Optional[str] = RUN_ID,
    targets: str = typer.Option("fastapi,litserve,triton-http"), engine: str = ENGINE,
    concurrencies: str = typer.Option("1,16"), payload: str = typer.Option("jpeg"),
    price_per_hour: Optional[float] = PRICE,
):
    """Peer baseline: servelab service vs LitServe vs Triton, same engine, same requests."""
    from servelab.bench import experiments as ex

    run = _new_run(run_id, "peer")
    recs = ex.peer_baseline(run, targets=_strs(targets), engine=engine, concurrencies=_ints(concurrencies),
                            payload=payload, quick=quick, window_s=window_s)
    _finish(run, recs, price_per_hour)


@app.command()
def report(run: str = typer.Argument(..., help="run id or folder"), price_per_hour: Optional[float] = PRICE):
    """(Re)write a run's tables and plots; with --price-per-hour also its cost table."""
    from servelab.bench.report import write_report

    for p in write_report(run, price_per_hour):
        typer.echo(str(p))


@app.command()
def cost(run: str = typer.Argument(..., help="run id or folder"),
         price_per_hour: float = typer.Option(..., "--price-per-hour", help="machine price per hour"),
         currency: str = typer.Option("USD")):
    """images/s -> cost per 1,000 images at a given price per hour."""
    from servelab.bench.experiments import cost_table
    from servelab.bench.records import load_records
    from servelab.bench.report import markdown_table

    if price_per_hour <= 0:
        raise ValueError("--price-per-hour must be > 0")
    typer.echo(markdown_table(cost_table(load_records(run), price_per_hour, currency)))


@app.command()
def compare(run_a: str = typer.Argument(..., help="baseline run (id or folder)"),
            run_b: str = typer.Argument(..., help="new run (id or folder)"),
            min_noise: float = typer.Option(0.02, help="smallest noise band (fraction)"),
            min_fraction: float = typer.Option(0.9, help="share of points within noise for B to reproduce A"),
            check: bool = typer.Option(False, "--check", help="exit 1 unless B reproduces A")):
    """B vs A point by point (within noise when their window ranges overlap or the change is inside the spread),
    the share of points within noise, and whether each headline sentence makes the same claim."""
    from servelab.bench.compare import compare as do_compare
    from servelab.bench.report import markdown_table

    c = do_compare(run_a, run_b, min_noise=min_noise, min_fraction=min_fraction)
    if not c.points and not c.headlines:
        raise ValueError("the two runs have no measurement points or headlines in common")
    cols = ["experiment", "point", "throughput_img_s A", "throughput_img_s B", "throughput_img_s Δ%",
            "latency_p50_ms Δ%", "ratio A", "ratio B", "verdict"]
    cols = [k for k in cols if any(p.get(k) is not None for p in c.points)]
    typer.echo(markdown_table(c.points, cols))
    if c.headlines:
        typer.echo(markdown_table(c.headlines, ["headline", "verdict", "A", "B"]))
    typer.echo(c.summary())
    if check and not c.reproduced:
        raise typer.Exit(1)
