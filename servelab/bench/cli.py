"""`servelab bench …` commands: each starts the servers it measures (`with served(…)`), runs a named experiment
into results/<run-id>/ and prints its table with each point's window range and whether it settled.

Common options: --quick (seconds-long smoke run; its numbers are not results), --tolerance and --max-windows
(when a point counts as settled), --run-id (append to an existing run), --price-per-hour (adds a cost table).
"""

from __future__ import annotations

import contextlib

import typer

from servelab.errors import InvalidValue

app = typer.Typer(no_args_is_help=True)

QUICK = typer.Option(False, "--quick", help="smoke run in seconds (tiny windows; numbers are not results)")
TOLERANCE = typer.Option(0.1, "--tolerance", help="a point settles when its last 3 windows agree within this fraction")
MAX_WINDOWS = typer.Option(8, "--max-windows", help="most windows per point (A/B: window pairs) before giving up")
RUN_ID = typer.Option(None, "--run-id", help="run id under results/ (default: new, timestamped)")
PRICE = typer.Option(None, "--price-per-hour", help="machine price per hour: adds a cost-per-1,000-images table")
ENGINE = typer.Option("onnx", help="engine: torch | onnx | onnx-int8 | emulated (an emulated accelerator, not a "
                                   "model: SERVELAB_DEVICE_PROFILE names its profile)")
SERVER = "fastapi | litserve | triton-http | triton-grpc"
LINK = typer.Option("loopback", "--link", help="client-server link: loopback, or a shaped one such as "
                    "wan-100mbit-20ms (100 Mbit/s each way, 20 ms round trip); records name it")


def _ints(text: str) -> tuple:
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise InvalidValue(f"expected a comma-separated list of integers, got {text!r}") from None


def _strs(text: str) -> tuple:
    return tuple(x.strip() for x in text.split(",") if x.strip())


def _opts(quick: bool, tolerance: float, max_windows: int):
    from servelab.bench.load.options import LoadOpts

    if quick:
        return LoadOpts.smoke()
    if not 0 < tolerance < 1 or max_windows < 3:
        raise InvalidValue("--tolerance must be between 0 and 1 and --max-windows at least 3")
    return LoadOpts(tolerance=tolerance, max_windows=max_windows)


def _finish(run, records, price_per_hour=None, columns=None) -> None:
    from servelab.bench.report.sentences import ratio_sentence
    from servelab.bench.report.tables import COLUMNS, flat_rows, goals_table, markdown_table, write_report

    paths = write_report(run, price_per_hour)
    rows = [r for r in flat_rows(records) if r["kind"] not in ("derived", "ab")]
    cols = columns or [c for c in COLUMNS if c not in ("experiment", "value", "value_min", "value_max", "threshold",
                                                       "met", "a", "b", "ratio", "ratio_min", "ratio_max", "goal")
                       and any(r.get(c) not in (None, "") for r in rows)]
    typer.echo(markdown_table(rows, cols))
    for r in records:
        if r.get("kind") == "ab":
            typer.echo(ratio_sentence(r))
    t = goals_table(records)
    if t:
        typer.echo("Goals:")
        typer.echo(markdown_table(t))
    for r in records:
        if r.get("kind") == "unavailable":
            typer.echo(f"not available: {r['server']} {r.get('engine') or ''} {r.get('provider') or ''}: {r.get('note')}")
    if any(r.get("quick") for r in records):
        typer.echo("quick run: these numbers check that things run; they are not results")
    typer.echo(f"weights: {run.weights}")
    typer.echo(f"run {run.run_id}: {run.dir / 'records.jsonl'} ({len(run.records)} records; "
               f"{len(paths)} tables/plots under {run.dir})")


def _new_run(run_id, name):
    from servelab.bench.results.records import Run

    return Run(run_id=run_id, name=name)


@contextlib.contextmanager
def _serve(run, server: str, engine: str = "onnx", link: str = "loopback", **kw):
    """Start `server` for the measurement; its clients reach it across `link` (servelab.bench.servers.link)."""
    from servelab.bench.servers.lifecycle import served
    from servelab.bench.servers.link import network_link

    with served(server, engine=engine, log_path=run.dir / f"{server}.log", **kw) as srv:
        if server == "in-process":
            yield srv
            return
        with network_link(link, srv) as path:
            yield path.over(srv)


@app.command()
def service(
    quick: bool = QUICK, tolerance: float = TOLERANCE, max_windows: int = MAX_WINDOWS, run_id: str | None = RUN_ID,
    engines: str = typer.Option("torch,onnx,onnx-int8", help="engines measured raw (in-process)"),
    served_engines: str | None = typer.Option(None, help="engines served (default: all; quick: onnx)"),
    payload: str = typer.Option("tensor", help="served payload: tensor | jpeg"),
    threads: int = typer.Option(0, help="engine threads (0 = all cores)"),
    price_per_hour: float | None = PRICE,
):
    """Raw engines at batch 1/16; each served engine at c=1, and served c=16 vs raw batch 16 interleaved; goals."""
    from servelab.bench import experiments as ex
    from servelab.bench.results.goals import service_goals

    run, opts = _new_run(run_id, "service"), _opts(quick, tolerance, max_windows)
    engines_ = _strs(engines)
    recs = ex.raw_engines(run, engines=engines_, batches=(1, 16), threads=threads, opts=opts, experiment="service")
    for engine in _strs(served_engines) if served_engines else (("onnx",) if quick else engines_):
        with _serve(run, "fastapi", engine, payload=payload, threads=threads, max_batch=16) as srv:
            recs += ex.service(run, srv, payload=payload, threads=threads, opts=opts)
    recs += service_goals(run, recs)
    _finish(run, recs, price_per_hour)


@app.command()
def triton(
    quick: bool = QUICK, tolerance: float = TOLERANCE, max_windows: int = MAX_WINDOWS, run_id: str | None = RUN_ID,
    concurrency: int = typer.Option(16, help="concurrency of the batch-1 served measurements"),
    price_per_hour: float | None = PRICE,
):
    """Triton batch-1 at c=16 vs offline batch-16, gRPC vs HTTP, JPEG vs tensor — each interleaved; goals."""
    from servelab.bench import experiments as ex

    run, opts = _new_run(run_id, "triton"), _opts(quick, tolerance, max_windows)
    with _serve(run, "triton-grpc", payload="tensor") as srv:
        recs = ex.triton(run, srv, concurrency=concurrency, opts=opts)
    _finish(run, recs, price_per_hour)


@app.command()
def engines(
    quick: bool = QUICK, tolerance: float = TOLERANCE, max_windows: int = MAX_WINDOWS, run_id: str | None = RUN_ID,
    engines: str = typer.Option("torch,onnx,onnx-int8"), providers: str = typer.Option("cpu,cuda,tensorrt"),
    batches: str = typer.Option("1,8,16,32"), threads: int = typer.Option(0), price_per_hour: float | None = PRICE,
):
    """Raw in-process throughput per engine / provider / batch (unavailable providers are recorded as such)."""
    from servelab.bench import experiments as ex

    run, opts = _new_run(run_id, "engines"), _opts(quick, tolerance, max_windows)
    recs = ex.raw_engines(run, engines=_strs(engines), providers=_strs(providers), batches=_ints(batches),
                          threads=threads, opts=opts)
    _finish(run, recs, price_per_hour)


@app.command("batch-sweep")
def batch_sweep(
    quick: bool = QUICK, tolerance: float = TOLERANCE, max_windows: int = MAX_WINDOWS, run_id: str | None = RUN_ID,
    server: str = typer.Option("in-process", help=f"in-process | {SERVER}"),
    engine: str = ENGINE, batches: str = typer.Option("1,2,4,8,16,32"), payload: str = typer.Option("tensor"),
    price_per_hour: float | None = PRICE, link: str = LINK,
):
    """Throughput and latency against batch size (one caller)."""
    from servelab.bench import experiments as ex

    run, opts = _new_run(run_id, "batch-sweep"), _opts(quick, tolerance, max_windows)
    b = _ints(batches)
    kw = {} if server == "in-process" else {"payload": payload, "max_batch": max(b)}
    if server == "litserve":
        kw.pop("max_batch")
    with _serve(run, server, engine, link=link, **kw) as srv:
        recs = ex.batch_sweep(run, srv, batches=b, payload=payload, opts=opts)
    _finish(run, recs, price_per_hour)


@app.command("concurrency-sweep")
def concurrency_sweep(
    quick: bool = QUICK, tolerance: float = TOLERANCE, max_windows: int = MAX_WINDOWS, run_id: str | None = RUN_ID,
    server: str = typer.Option("fastapi", help=SERVER), engine: str = ENGINE,
    concurrencies: str = typer.Option("1,2,4,8,16,32"), payload: str = typer.Option("tensor"),
    price_per_hour: float | None = PRICE, link: str = LINK,
):
    """Closed-loop concurrency sweep with batch-1 requests (server-side batching curve)."""
    from servelab.bench import experiments as ex

    run, opts = _new_run(run_id, "concurrency-sweep"), _opts(quick, tolerance, max_windows)
    with _serve(run, server, engine, link=link, payload=payload) as srv:
        recs = ex.concurrency_sweep(run, srv, concurrencies=_ints(concurrencies), payload=payload, opts=opts)
    _finish(run, recs, price_per_hour)


@app.command("rate-sweep")
def rate_sweep(
    quick: bool = QUICK, run_id: str | None = RUN_ID, server: str = typer.Option("fastapi", help=SERVER),
    engine: str = ENGINE, rates: str = typer.Option("5,10,20,40", help="arrival rates (requests/s)"),
    duration_s: float = typer.Option(10.0), payload: str = typer.Option("tensor"),
    max_workers: int = typer.Option(64, help="client workers (most requests in flight)"),
    drop_after_s: float | None = typer.Option(None, help="drop (and count) arrivals not started within this"),
    seed: int = typer.Option(0, help="arrival schedule seed"),
):
    """Open-loop Poisson arrivals: latency from arrival, late starts, drops and backlog per rate."""
    from servelab.bench import experiments as ex

    run = _new_run(run_id, "rate-sweep")
    if quick:
        duration_s = min(duration_s, 2.0)
    with _serve(run, server, engine, payload=payload) as srv:
        recs = ex.rate_sweep(run, srv, rates=tuple(float(x) for x in _strs(rates)), duration_s=duration_s,
                             warmup_s=0.3 if quick else 2.0, max_workers=max_workers, drop_after_s=drop_after_s,
                             seed=seed, quick=quick)
    _finish(run, recs)


@app.command()
def payload(
    quick: bool = QUICK, tolerance: float = TOLERANCE, max_windows: int = MAX_WINDOWS, run_id: str | None = RUN_ID,
    servers: str = typer.Option("fastapi,triton-http"), engine: str = ENGINE, concurrency: int = typer.Option(4),
    link: str = LINK,
):
    """Client serialisation time and bytes per format, then JPEG vs tensor per server, interleaved."""
    from servelab.bench import experiments as ex

    run, opts = _new_run(run_id, "payload"), _opts(quick, tolerance, max_windows)
    recs = ex.serialisation(run, batches=(1,), repeats=5 if quick else 30, experiment="payload")
    for server in _strs(servers):
        try:
            with _serve(run, server, engine, link=link, payload="tensor") as srv:
                recs += ex.payload(run, srv, concurrency=concurrency, opts=opts)
        except Exception as exc:
            recs.append(ex.unavailable(run, "payload", server, exc))
    _finish(run, recs)


@app.command("http-grpc")
def http_grpc(
    quick: bool = QUICK, tolerance: float = TOLERANCE, max_windows: int = MAX_WINDOWS, run_id: str | None = RUN_ID,
    batches: str = typer.Option("1"), concurrencies: str = typer.Option("1,16"), payload: str = typer.Option("tensor"),
    link: str = LINK,
):
    """Triton over gRPC vs HTTP, same model and payload, interleaved at each point."""
    from servelab.bench import experiments as ex

    run, opts = _new_run(run_id, "http-grpc"), _opts(quick, tolerance, max_windows)
    with _serve(run, "triton-http", link=link, payload=payload) as srv:
        recs = ex.http_vs_grpc(run, srv, batches=_ints(batches), concurrencies=_ints(concurrencies), payload=payload,
                               opts=opts)
    _finish(run, recs)


@app.command("queue-delay")
def queue_delay(
    quick: bool = QUICK, tolerance: float = TOLERANCE, max_windows: int = MAX_WINDOWS, run_id: str | None = RUN_ID,
    delays_us: str = typer.Option("0,1000,4000,16000", help="dynamic-batching max queue delays (µs)"),
    concurrencies: str = typer.Option("1,4,16"), protocol: str = typer.Option("grpc"),
):
    """Triton dynamic-batching queue delay × concurrency grid (the model is reloaded between delays)."""
    from servelab.bench import experiments as ex

    run, opts = _new_run(run_id, "queue-delay"), _opts(quick, tolerance, max_windows)
    with _serve(run, f"triton-{protocol}", payload="tensor") as srv:
        recs = ex.queue_delay_grid(run, srv, delays_us=_ints(delays_us), concurrencies=_ints(concurrencies),
                                   opts=opts)
    _finish(run, recs)


@app.command()
def instances(
    quick: bool = QUICK, tolerance: float = TOLERANCE, max_windows: int = MAX_WINDOWS, run_id: str | None = RUN_ID,
    counts: str = typer.Option("1,2,3,4", help="instance_group counts"), concurrencies: str = typer.Option("16"),
    protocol: str = typer.Option("grpc"), price_per_hour: float | None = PRICE,
):
    """Triton instance_group count scaling (the CPU analogue of the multi-GPU study), with scaling efficiency."""
    from servelab.bench import experiments as ex
    from servelab.bench.results.goals import scaling_efficiency

    run, opts = _new_run(run_id, "instances"), _opts(quick, tolerance, max_windows)
    with _serve(run, f"triton-{protocol}", payload="tensor") as srv:
        recs = ex.instance_scaling(run, srv, counts=_ints(counts), concurrencies=_ints(concurrencies), opts=opts)
    recs += scaling_efficiency(run, recs)
    _finish(run, recs, price_per_hour)


@app.command("cold-start")
def cold_start(
    run_id: str | None = RUN_ID, servers: str = typer.Option("fastapi,litserve,triton-http"), engine: str = ENGINE,
    repeats: int = typer.Option(3, help="Fresh starts per server (median, min and max are recorded)."),
):
    """Process start to ready, and the first request's latency, per server."""
    from servelab.bench import experiments as ex

    run = _new_run(run_id, "cold-start")
    recs = ex.cold_start(run, servers=_strs(servers), engine=engine, repeats=repeats)
    _finish(run, recs)


@app.command("ort-profile")
def ort_profile(
    quick: bool = QUICK, run_id: str | None = RUN_ID, engine: str = ENGINE,
    provider: str = typer.Option("cpu"), batch: int = typer.Option(8), iterations: int = typer.Option(5),
):
    """ONNX Runtime profile: share of kernel time by op type and the provider that ran each node."""
    from servelab.bench import experiments as ex
    from servelab.bench.report.tables import markdown_table

    run = _new_run(run_id, "ort-profile")
    recs = ex.ort_profile(run, engine=engine, provider=provider, batch=batch, iterations=1 if quick else iterations)
    r = recs[0]
    if r["kind"] == "unavailable":
        typer.echo(f"not available: {r['note']}")
    else:
        rows = [{"op_type": k, "share_pct": round(v * 100, 2), "time_ms": r["op_time_ms"][k]}
                for k, v in r["op_time_share"].items()]
        typer.echo(markdown_table(rows[:15]))
        typer.echo(f"nodes by provider: {r['nodes_by_provider']}; CPU-fallback nodes: {r['n_cpu_fallback_nodes']}")
    _finish(run, recs, columns=["kind", "server", "engine", "provider", "batch", "note"])


@app.command()
def peer(
    quick: bool = QUICK, tolerance: float = TOLERANCE, max_windows: int = MAX_WINDOWS, run_id: str | None = RUN_ID,
    servers: str = typer.Option("fastapi,litserve,triton-http"), engine: str = ENGINE,
    concurrencies: str = typer.Option("1,16"), payload: str = typer.Option("jpeg"),
    price_per_hour: float | None = PRICE,
):
    """Peer baseline: servelab service vs LitServe (interleaved) and Triton, same engine, same requests."""
    from servelab.bench import experiments as ex

    run, opts = _new_run(run_id, "peer"), _opts(quick, tolerance, max_windows)
    with contextlib.ExitStack() as stack:
        handles = [stack.enter_context(_serve(run, s, engine, payload=payload)) for s in _strs(servers)]
        recs = ex.peer_baseline(run, handles, concurrencies=_ints(concurrencies), payload=payload, opts=opts)
    _finish(run, recs, price_per_hour)


@app.command()
def overload(
    quick: bool = QUICK, run_id: str | None = RUN_ID,
    servers: str = typer.Option("fastapi,fastapi-no-admission,litserve,triton-http", help="servers to overload"),
    engine: str = typer.Option("onnx-int8", help="engine: onnx | onnx-int8 (all servers run the same one)"),
    levels: str = typer.Option("1,2,4,8", help="offered load as multiples of the measured capacity"),
    duration_s: float = typer.Option(10.0, help="measured seconds per level (after a warm-up)"),
    queue: int = typer.Option(64, help="the service's in-flight limit and queue bound"),
    deadline_s: float = typer.Option(10.0, help="the service's per-request deadline"),
    max_wait_ms: float | None = typer.Option(None, help="the service's wait budget in ms (default: its own, one "
                                                        "full batch at the engine's measured pace)"),
):
    """Open loop past capacity: goodput, accepted p99, 503s, 5xx and crashes per server, with the goals."""
    from servelab.bench.experiments import overload as ov
    from servelab.bench.report.tables import goals_table, markdown_table

    run = _new_run(run_id, "overload")
    recs = ov.overload(run, servers=_strs(servers), engine=engine, levels=_ints(levels), duration_s=duration_s,
                       queue=queue, deadline_s=deadline_s, quick=quick, max_wait_ms=max_wait_ms)
    typer.echo(markdown_table(ov.knee_rows(recs)))
    typer.echo(markdown_table(goals_table(recs)))
    typer.echo(f"run {run.run_id}: {run.dir / 'records.jsonl'} ({len(run.records)} records)")


@app.command()
def frontend(
    quick: bool = QUICK, run_id: str | None = RUN_ID,
    kinds: str = typer.Option("tensor,uint8,jpeg", help="request bodies: tensor (float32) | uint8 | jpeg"),
    connections: str = typer.Option("8,32", help="wrk's keep-alive connections (perf_analyzer's concurrency), one "
                                                 "point each"),
    window_s: float = typer.Option(5.0, help="seconds per window (one wrk or perf_analyzer run)"),
    windows: int = typer.Option(3, help="windows per point, interleaved across sides; the range is theirs"),
    trees: str | None = typer.Option(None, help="the service from these source trees, LABEL=PATH,... (e.g. "
                                                "after=.,before=../servelab-main); default: this one"),
    floor: bool = typer.Option(True, help="measure the bare-ASGI floor beside the service"),
    litserve: bool = typer.Option(True, help="measure LitServe serving the same emulated engine (wrk, JSON bodies)"),
    triton: bool = typer.Option(True, help="measure Triton's C++ HTTP frontend on the emulated model, driven by "
                                           "perf_analyzer (`servelab triton get-perf-analyzer`)"),
    workers: int = typer.Option(1, help="the service's frontend processes (SERVELAB_WORKERS)"),
    server_cores: str | None = typer.Option(None, help="taskset core list for the servers (default: the 2nd core)"),
    client_cores: str | None = typer.Option(None, help="taskset core list for wrk and perf_analyzer (default: the "
                                                       "1st core)"),
    max_delay_ms: float | None = typer.Option(None, help="the service's batching delay (default: its own, "
                                                         "SERVELAB_MAX_DELAY_MS)"),
):
    """The frontend's own cost: requests/s and CPU ms per request on an emulated device that takes no time, beside a
    bare ASGI app reading the same body, LitServe and Triton (wrk as the client, perf_analyzer for Triton: not the
    same client; server and client on separate cores)."""
    from servelab.bench.experiments import frontend as fe
    from servelab.bench.report.tables import goals_table, markdown_table

    run = _new_run(run_id, "frontend")
    recs = fe.frontend(run, kinds=_strs(kinds), connections=_ints(connections), window_s=window_s, windows=windows,
                       trees=fe.parse_trees(trees), floor=floor, litserve=litserve, triton=triton, workers=workers,
                       server_cores=server_cores, client_cores=client_cores, quick=quick,
                       env={"SERVELAB_MAX_DELAY_MS": max_delay_ms} if max_delay_ms is not None else None)
    typer.echo(markdown_table(fe.table_rows(recs)))
    measured = [r for r in recs if r.get("kind") == "load"]
    if measured:
        p = measured[0]["params"]
        typer.echo(f"{fe.clients_sentence(recs)}; {p['cpu_pinning']}; load average (1/5/15 min) before "
                   f"{p['load_average_before']}, after {p['load_average_after']}")
    goals = goals_table(recs)
    if goals:
        typer.echo(markdown_table(goals))
    for r in recs:
        if r.get("kind") == "unavailable":
            how = f" ({r['params']['body_format']} body)" if r["params"].get("body_format") else ""
            typer.echo(f"not measured: {r['params'].get('side')} {r['payload'] or ''}{how}: {r['note']}")
    if quick:
        typer.echo("quick run: these numbers check that things run; they are not results")
    path = fe.plot(recs, run.dir / "frontend.png")
    typer.echo(f"run {run.run_id}: {run.dir / 'records.jsonl'} ({len(run.records)} records)"
               + (f"; plot {path}" if path else ""))


@app.command()
def report(run: str = typer.Argument(..., help="run id or folder"), price_per_hour: float | None = PRICE):
    """(Re)write a run's tables and plots; with --price-per-hour also its cost table."""
    from servelab.bench.report.tables import write_report

    for p in write_report(run, price_per_hour):
        typer.echo(str(p))


@app.command()
def cost(run: str = typer.Argument(..., help="run id or folder"),
         price_per_hour: float = typer.Option(..., "--price-per-hour", help="machine price per hour"),
         currency: str = typer.Option("USD")):
    """images/s -> cost per 1,000 images at a given price per hour."""
    from servelab.bench.report.tables import cost_table, markdown_table
    from servelab.bench.results.records import load_records

    if price_per_hour <= 0:
        raise InvalidValue("--price-per-hour must be > 0")
    typer.echo(markdown_table(cost_table(load_records(run), price_per_hour, currency)))


@app.command()
def compare(run_a: str = typer.Argument(..., help="baseline run (id or folder)"),
            run_b: str = typer.Argument(..., help="new run (id or folder)"),
            min_noise: float = typer.Option(0.02, help="smallest noise band (fraction)"),
            min_fraction: float = typer.Option(0.9, help="share of points within noise for B to reproduce A"),
            check: bool = typer.Option(False, "--check", help="exit 1 unless B reproduces A")):
    """B vs A point by point (within noise when their window ranges overlap, the change is inside the spread and the
    machine's drift, or the drift probes show the machine itself that much faster or slower at that moment), the
    share of points within noise, and whether each headline's verdicts (what was compared, ranked or not, which side
    ahead) are the same."""
    from servelab.bench.report.tables import markdown_table
    from servelab.bench.results.compare import compare as do_compare

    c = do_compare(run_a, run_b, min_noise=min_noise, min_fraction=min_fraction)
    if not c.points and not c.headlines:
        raise InvalidValue("the two runs have no measurement points or headlines in common")
    cols = ["experiment", "point", "throughput_img_s A", "throughput_img_s B", "throughput_img_s Δ%",
            "latency_p50_ms Δ%", "machine B÷A", "ratio A", "ratio B", "verdict"]
    cols = [k for k in cols if any(p.get(k) is not None for p in c.points)]
    typer.echo(markdown_table(c.points, cols))
    if c.headlines:
        typer.echo(markdown_table(c.headlines, ["headline", "verdict", "A", "B"]))
        for h in c.headlines:
            for d in h.get("differences", []):
                typer.echo(f"\n{h['headline']} differs here: {d}")
    typer.echo(c.summary())
    if check and not c.reproduced:
        raise typer.Exit(1)


@app.command("gpu-reference")
def gpu_reference(
    stage: str = typer.Option(..., help="raw (the engine on the GPU, no server) | service (FastAPI on the GPU) | "
                                        "triton (the embedded tritonserver, encoder on KIND_GPU) | ceiling (nvJPEG "
                                        "into a CUDA graph, no server) | profile (py-spy on the loaded service)"),
    run_id: str | None = RUN_ID,
    budget_s: float = typer.Option(240.0, help="about how long the stage may take; optional steps are skipped past it"),
):
    """One stage of the GPU reference run (scripts/gpu_reference.sh runs them all); stages share one run."""
    from servelab.bench.experiments.gpu_reference import run_stage

    run = _new_run(run_id, "gpu-reference")
    _finish(run, run_stage(run, stage, budget_s=budget_s))


@app.command("device-profile")
def device_profile(run: str = typer.Argument(..., help="run id or folder with raw in-process batch records"),
                   engine: str | None = typer.Option(None, help="the engine whose curve to fit (needed when the run "
                                                                 "measured several)"),
                   provider: str | None = typer.Option(None, help="its execution provider (cpu, cuda, tensorrt)"),
                   precision: str | None = typer.Option(None, help="its precision, where the run measured several "
                                                                   "(fp32, fp16, bf16)"),
                   experiment: str | None = typer.Option(None, help="the experiment whose records to fit, where "
                                                                    "several hold that engine's batch curve"),
                   name: str | None = typer.Option(None, help="profile name (default: <engine>-<provider>-<run id>)"),
                   time_scale: float | None = typer.Option(None, "--time-scale", help="real seconds per measured "
                                                           "second (default: t(1) about 0.1 s, at least 1)"),
                   out: str | None = typer.Option(None, "--out", help="profile file (default: in the run folder)")):
    """Write an emulated-device profile fitted to a run's measured batch curve (use it with
    SERVELAB_ENGINE=emulated SERVELAB_DEVICE_PROFILE=<the file>)."""
    import json
    import re
    from pathlib import Path

    from servelab.bench.experiments.device_fit import batch_curve, fit_profile
    from servelab.bench.results.records import load_records, resolve_run_dir
    from servelab.model.device_profile import write_profile

    run_dir = resolve_run_dir(run)
    records = load_records(run_dir)
    curve = batch_curve(records, engine=engine, provider=provider, precision=precision, experiment=experiment)
    first = next(r for r in records if r.get("kind") == "raw" and r.get("batch") in curve
                 and (engine is None or r.get("engine") == engine)
                 and (experiment is None or r.get("experiment") == experiment))
    engine, provider = first.get("engine"), first.get("provider") or "cpu"
    what = " ".join(x for x in (engine, first.get("precision")) if x)
    env_path = run_dir / "environment.json"
    env = json.loads(env_path.read_text()) if env_path.is_file() else {}
    gpus = ", ".join(g.get("name", "?") if isinstance(g, dict) else str(g) for g in env.get("gpus") or [])
    machine = gpus if provider != "cpu" and gpus else (env.get("cpu_model") or "an unrecorded machine")
    p = fit_profile(curve, name=name or re.sub(r"[^A-Za-z0-9_.-]+", "-", f"{engine}-{provider}-{run_dir.name}"),
                    source=f"fitted to run {run_dir.name}: {what} on {provider} ({machine}), raw in-process "
                           f"batches ({first.get('experiment')}), one caller", time_scale=time_scale)
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", "-".join(x for x in (engine, provider, first.get("precision")) if x))
    path = write_profile(p, Path(out) if out else run_dir / f"device-profile-{slug}.json")
    typer.echo(f"{p.label}: t(B) = {p.fixed_ms:g} ms + {p.per_image_ms:g} ms × max(B, {p.full_at}), "
               f"slowed {p.time_scale:g}× (t(1) = {p.t_s(1) * 1000:.0f} ms here)")
    typer.echo(str(path))
