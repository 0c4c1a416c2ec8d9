"""Overload: what a server does with more work than it can finish (`servelab bench overload`).

For each server: measure its capacity (closed loop, batch-1 JPEG requests; once for the two copies of the
service, which differ only past capacity), then offer open-loop Poisson arrivals at 1×, 2×, 4× and 8× that
rate. The load generator and the server run on separate cores (`pin`; on one shared core, the client's own
work would count as the server's latency). Each level is one record: goodput (images/s answered 200 inside the
measured span) and its ratio to goodput at 1×, latency of the accepted requests from their scheduled arrival (so
waiting for a free client counts) and its p99's ratio to the p99 at 1×, how many were shed (503/429), how many
failed otherwise (5xx, no answer), and whether the server process survived. The goals, as `derived` records:

  goodput at every overload level      >= 90 % of goodput at capacity (1×)
  accepted p99 at every overload level <= 2 × the accepted p99 at capacity (1×)
  5xx answers (other than 503)         == 0   (a 503 is shedding, counted apart as `shed`)
  crashes                              == 0

Servers, all on the same engine and the same requests:

  fastapi                servelab's service with admission control: at most `queue` requests in flight
                         (reading, decoding, queued, running) and, past the count it always admits while
                         refusing nobody, at most its wait budget of expected wait (by default one full batch
                         at the engine's pace), 503 + Retry-After before the body is read; a request that has
                         waited past the budget is dropped with 503 before it is computed; and a per-request
                         deadline. Each level's record holds the budget the service had at its end
  fastapi-no-admission   the same service with the in-flight limit, wait budget and deadline off: every body is
                         read and decoded, and only then refused when the batcher's `queue`-image queue is full
  litserve               the peer baseline (LitServe has no queue bound)
  triton-http            the embedded tritonserver, JPEG ensemble; its encoder is reloaded with a bounded
                         queue (max_queue_size 64): the next request is refused at once

Clients never retry here: each arrival is one request, so a refusal shows as a refusal. Goodput and
latency come from the measured span; the outcome counts (`shed`, `http_5xx`, `no_answer`) cover every
request sent at that level, warm-up and the answers still arriving after the span included.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import threading
from collections import Counter
from pathlib import Path

from servelab.bench.load.closed import closed_loop
from servelab.bench.load.cpu import pinned
from servelab.bench.load.inputs import sample_jpegs
from servelab.bench.load.options import LoadOpts
from servelab.bench.load.poisson import open_loop
from servelab.bench.load.workers import client_factory
from servelab.bench.results.goals import goal_record
from servelab.bench.results.records import Run, memory_snapshot
from servelab.errors import InvalidValue
from servelab.vocabulary import Server

SERVERS = (Server.FASTAPI, Server.FASTAPI_NO_ADMISSION, Server.LITSERVE, Server.TRITON_HTTP)
# the same service with and without its gate: one capacity serves both (its clients honour Retry-After, so the gate
# refusing some of them only spaces them out), so both copies are offered the same arrival rates
SERVICE_COPIES = ("fastapi", "fastapi-no-admission")
LEVELS = (1, 2, 4, 8)
EXPERIMENT = "overload"
CAPACITY_RETRIES = 8  # the capacity's clients wait as the service's Retry-After asks, up to this many times
TRITON_QUEUE = 64  # max_queue_size the encoder is reloaded with here (the lab's config leaves it unbounded)


# --- what happened to each request ------------------------------------------------------------------------

def outcome(exc: BaseException | None) -> str:
    """ok | shed (503/429: refused for lack of capacity) | http_5xx | http_4xx | no_answer."""
    if exc is None:
        return "ok"
    status = getattr(exc, "status", None)
    if status in (429, 503):
        return "shed"
    if isinstance(status, int) and status >= 500:
        return "http_5xx"
    if isinstance(status, int) and status >= 400:
        return "http_4xx"
    if "queue" in str(exc).lower() and "exceed" in str(exc).lower():  # Triton over gRPC says so in words
        return "shed"
    return "no_answer"


def counting(factory, tally: Counter, lock: threading.Lock):
    """Wrap a worker factory so each request's outcome is tallied (the failure is still raised, so the load
    generator counts it as an error and keeps it out of the accepted latencies)."""

    def wrapped(i: int):
        work, close = factory(i)

        def counted():
            try:
                n = work()
            except Exception as exc:
                with lock:
                    tally[outcome(exc)] += 1
                raise
            with lock:
                tally["ok"] += 1
            return n

        return counted, close

    return wrapped


# --- the servers, configured for overload -------------------------------------------------------------------

@contextlib.contextmanager
def overload_server(name: str, engine: str, *, queue: int, deadline_s: float, log_dir: Path,
                    max_wait_ms: float | None = None):
    """Start `name` configured as described in the module docstring; yields (handle, make_client, settings)."""
    from servelab.bench.servers.lifecycle import served
    from servelab.client import InferenceClient

    log_path = log_dir / f"{name}.log"
    if name in ("fastapi", "fastapi-no-admission"):
        admission = name == "fastapi"
        env = {"SERVELAB_MAX_IN_FLIGHT": queue if admission else 0,
               "SERVELAB_REQUEST_TIMEOUT_S": deadline_s if admission else 0,
               **({"SERVELAB_MAX_WAIT_MS": max_wait_ms} if admission and max_wait_ms is not None else {}),
               **({} if admission else {"SERVELAB_MAX_WAIT_MS": 0})}
        with served("fastapi", engine, payload="jpeg", max_queue=queue, env=env, log_path=log_path) as srv:
            # no retries in the open loop (a refusal shows as one); `retries` for the capacity's closed loop
            limits = _info(srv.url)["limits"]
            yield srv, (lambda retries=0: InferenceClient(mode="remote", backend="fastapi", url=srv.url,
                                                          payload="jpeg", retries=retries)), \
                {"admission_control": admission, "max_in_flight": queue if admission else None,
                 "request_timeout_s": deadline_s if admission else None, "max_queue_images": queue,
                 "max_wait_ms": limits.get("max_wait_ms") if admission else None,
                 "wait_budget": limits.get("wait_budget") if admission else None,
                 "always_admit": limits.get("always_admit") if admission else None}
    elif name == "litserve":
        with served("litserve", engine, payload="jpeg", log_path=log_path) as srv:
            yield srv, srv.make_client, {"admission_control": False, "queue_bound": None}
    elif name == "triton-http":
        with served("triton-http", "onnx", payload="jpeg", log_path=log_path) as srv:
            encoder_file = _triton_engine(srv, engine)
            srv = dataclasses.replace(srv, engine=engine, client_options={**srv.client_options, "retries": 0})
            yield srv, srv.make_client, {"admission_control": True, "max_queue_size": TRITON_QUEUE,
                                         "queue_policy": "REJECT", "encoder_file": encoder_file}
    else:
        raise InvalidValue(f"server must be one of {', '.join(SERVERS)}, got {name!r}")


def _triton_engine(srv, engine: str) -> str:
    """Point the staged encoder at the engine's ONNX file (the int8 graph for onnx-int8) and reload it with its
    queue bounded at TRITON_QUEUE."""
    from servelab.config import Settings
    from servelab.model.export import ensure_exported

    meta = ensure_exported(Settings.from_env())
    if engine == "onnx":
        name = Path(meta["path"]).name
    elif engine == "onnx-int8" and meta.get("int8"):
        source = Path(meta["path"]).with_name(meta["int8"]["file"])
        target = Path(srv.repository) / srv.model / "1" / "model.onnx"
        tmp = target.with_name(".model.onnx.swap")
        tmp.unlink(missing_ok=True)
        os.symlink(source.resolve(), tmp)
        os.replace(tmp, target)
        name = source.name
    else:
        raise InvalidValue(f"Triton's CPU encoder runs onnx or onnx-int8, not {engine!r}")
    srv.reconfigure(max_queue=TRITON_QUEUE)  # a reload: the encoder opens its file again, with the bound
    return name


@contextlib.contextmanager
def started_on_server_cores(client_cores: int | None, enabled: bool = True):
    """Start what the block starts on the cores `pinned` will leave to the server, as `taskset` would: a server
    sizes its thread pools to the cores it may use when it starts, and one moved onto fewer cores afterwards runs
    more threads than it has cores. This thread's own cores come back at the end of the block."""
    if not enabled or not hasattr(os, "sched_setaffinity"):
        yield
        return
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        yield
        return
    n = min(client_cores or max(1, len(cores) // 4), len(cores) - 1)  # as servelab.bench.load.cpu.plan_cores
    os.sched_setaffinity(0, cores[n:])
    try:
        yield
    finally:
        os.sched_setaffinity(0, cores)


def _info(url: str) -> dict:
    import httpx

    return httpx.get(url.rstrip("/") + "/info", timeout=10).json()


def _alive(pid: int | None) -> bool:
    import psutil

    try:
        return pid is None or psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


# --- the experiment -----------------------------------------------------------------------------------------

def overload(run: Run | str | None = None, *, servers: tuple = SERVERS, engine: str = "onnx-int8",
             levels: tuple = LEVELS, duration_s: float = 10.0, warmup_s: float = 2.0, queue: int = 64,
             deadline_s: float = 10.0, capacity_concurrency: int = 32, quick: bool = False, seed: int = 0,
             max_wait_ms: float | None = None, pin: bool = True, client_cores: int | None = None) -> list[dict]:
    """Capacity, then open-loop levels × capacity, per server; records plus goal records. Returns them all.

    `max_wait_ms`: the service's wait budget (None: its default); `pin`: client and server on separate cores
    (`client_cores` for the client, by default a quarter of them, at least one)."""
    run = run if isinstance(run, Run) else Run(run_id=run, name=EXPERIMENT)
    if quick:
        duration_s, warmup_s = min(duration_s, 2.0), min(warmup_s, 0.5)
        capacity_concurrency = min(capacity_concurrency, 8)
    # capacity: windows of 20 answers and 2 s, not of 10 p50s (at 32 in flight a p50 is seconds long); three of
    # them: capacity only scales the levels below, and windows of 20 answers alone (about a second) never settled
    opts = LoadOpts.smoke() if quick else LoadOpts(min_requests=20, min_p50s=1.0, min_window_s=2.0, max_windows=3,
                                                   max_warmup_s=10.0)
    jpegs = list(sample_jpegs(1))  # one 640×480 photo per request
    out: list[dict] = []
    service_capacity: float | None = None  # the two service copies share one: below its limit the gate is idle
    for name in servers:
        with contextlib.ExitStack() as stack:
            with started_on_server_cores(client_cores, enabled=pin):
                srv, make, conf = stack.enter_context(overload_server(
                    name, engine, queue=queue, deadline_s=deadline_s, log_dir=run.dir, max_wait_ms=max_wait_ms))
            pinning = stack.enter_context(pinned(srv.pid, client_cores, enabled=pin))
            queue_limit = TRITON_QUEUE if name == "triton-http" else queue
            base = dict(server=name, backend=srv.backend, engine=engine, protocol="http", payload="jpeg", batch=1)
            shared = name in SERVICE_COPIES and capacity_concurrency <= queue
            if shared and service_capacity is not None:
                capacity, measured_on = service_capacity, SERVICE_COPIES[0]
            else:
                # clients that come back when the gate asks them to, as a user's would: ones that asked again at
                # once would keep the server's core busy refusing them, and measure that instead of its capacity
                cap_make = functools.partial(make, retries=CAPACITY_RETRIES) if name in SERVICE_COPIES else make
                cap = closed_loop(client_factory(cap_make, blobs=jpegs), capacity_concurrency, opts,
                                  desc=f"{EXPERIMENT} {name} capacity")
                capacity, measured_on = cap.throughput_img_s, name
                if shared:
                    service_capacity = capacity
            drain_s = queue_limit / capacity if capacity else None
            params = {**srv.params(), **conf, "cpu_pinning": pinning, "queue_limit_for_drain": queue_limit,
                      "drain_s": drain_s,
                      "capacity_img_s": capacity, "capacity_measured_on": measured_on, "load": opts.as_params()}
            if measured_on == name:
                out.append(run.record(EXPERIMENT, kind="load", concurrency=capacity_concurrency, **base,
                                      params={**params, "phase": "capacity"}, memory=memory_snapshot(srv.pid),
                                      **cap.summary()))
            points = []
            for level in levels:
                tally, lock = Counter(), threading.Lock()
                factory = counting(client_factory(make, blobs=jpegs), tally, lock)
                before = _safe(srv.snapshot)
                res = open_loop(factory, level * capacity, duration_s=duration_s, warmup_s=warmup_s,
                                max_duration_s=None if quick else 2 * duration_s,  # until three windows agree
                                max_workers=max(64, 4 * queue_limit), seed=seed + level, quick=quick,
                                window_s=max(1.0, duration_s / 4),  # windows long enough to hold whole batches
                                desc=f"{EXPERIMENT} {name} {level}x")
                crashed = not _alive(srv.pid)
                summary = res.summary()
                budget = {}  # the wait budget follows the engine's pace: the one this level ended with
                if conf.get("max_wait_ms") and not crashed:
                    now = _safe(functools.partial(_info, srv.url)) or {}
                    budget = {"max_wait_ms": now.get("limits", {}).get("max_wait_ms") or conf["max_wait_ms"]}
                rec = run.record(
                    EXPERIMENT, kind="load", rate_rps=round(level * capacity, 4), **base,
                    server_stats=srv.delta(before, _safe(srv.snapshot)) if not crashed else None,
                    memory=memory_snapshot(srv.pid),
                    params={**params, **budget, "phase": "open-loop", "level": level},
                    goodput_img_s=summary["throughput_img_s"], shed=tally["shed"], http_5xx=tally["http_5xx"],
                    http_4xx=tally["http_4xx"], no_answer=tally["no_answer"], crashed=crashed,
                    outcomes_total=dict(tally), **summary)
                points.append(rec)
                out.append(rec)
                if crashed:
                    break
            out += overload_goals(run, name, points, drain_s)
    return out


def _safe(fn):
    try:
        return fn()
    except Exception:
        return None


def overload_goals(run: Run, name: str, points: list[dict], drain_s: float | None = None) -> list[dict]:
    """The four goals for one server, from its open-loop points (level 1 is the capacity reference): goodput and
    accepted p99 at each overload level against level 1, 5xx other than 503, crashes. `drain_s` only annotates."""
    out = []
    at = {r["params"]["level"]: r for r in points}
    ref = at.get(1)
    for level, r in sorted(at.items()):
        if level == 1 or not ref:
            continue
        if ref["goodput_img_s"]:
            lo = (r.get("throughput_min_img_s") or 0) / (ref.get("throughput_max_img_s") or ref["goodput_img_s"])
            hi = (r.get("throughput_max_img_s") or 0) / (ref.get("throughput_min_img_s") or ref["goodput_img_s"])
            out.append(goal_record(run, EXPERIMENT, f"{name}: goodput at {level}x capacity / goodput at 1x",
                                   r["goodput_img_s"] / ref["goodput_img_s"], ">=", 0.9, band=(lo, hi),
                                   inputs=[r, ref]))
        p99, ref_p99 = r.get("latency_p99_ms"), ref.get("latency_p99_ms")
        if p99 is not None and ref_p99:
            note = f"p99 {p99 / 1000:.2f}s against {ref_p99 / 1000:.2f}s at 1x"
            if drain_s:
                note += f"; a full queue drains in {drain_s:.2f}s"
            out.append(goal_record(run, EXPERIMENT, f"{name}: accepted p99 at {level}x capacity / accepted p99 at 1x",
                                   p99 / ref_p99, "<=", 2.0, inputs=[r, ref], note=note))
    out.append(goal_record(run, EXPERIMENT, f"{name}: 5xx answers other than 503",
                           sum(r["http_5xx"] for r in points), "<=", 0, inputs=points))
    out.append(goal_record(run, EXPERIMENT, f"{name}: crashes", sum(bool(r["crashed"]) for r in points), "<=", 0,
                           inputs=points))
    return out


def knee_rows(records: list[dict]) -> list[dict]:
    """One row per server and level: the figures the overload knee is drawn from."""
    rows = []
    for r in records:
        if r.get("experiment") != EXPERIMENT or r.get("kind") != "load" or r["params"].get("phase") != "open-loop":
            continue
        p = r["params"]
        rows.append({"server": r["server"], "level": p["level"], "offered_rps": r["rate_rps"],
                     "capacity_img_s": round(p["capacity_img_s"], 2), "goodput_img_s": round(r["goodput_img_s"], 2),
                     "accepted_p50_ms": r["latency_p50_ms"], "accepted_p99_ms": r["latency_p99_ms"],
                     "shed_503": r["shed"], "http_5xx": r["http_5xx"], "no_answer": r["no_answer"],
                     "crashed": r["crashed"], "drain_s": None if p["drain_s"] is None else round(p["drain_s"], 2)})
    return rows


def plot_knee(records: list[dict], path: Path) -> Path | None:
    """The overload knee against offered load, one line per server: goodput as a share of the server's own
    goodput at 1× (left; the goal is the 0.9 line) and the accepted p99 (right, log)."""
    from servelab.bench.report.plots import pyplot, save_figure

    rows = knee_rows(records)
    if not rows:
        return None
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for server in dict.fromkeys(r["server"] for r in rows):
        rs = sorted((r for r in rows if r["server"] == server), key=lambda r: r["level"])
        x = [r["level"] for r in rs]
        ref = next((r["goodput_img_s"] for r in rs if r["level"] == 1), None) or float("nan")
        left.plot(x, [r["goodput_img_s"] / ref for r in rs], "o-", label=f"{server} (1× = {ref:.1f} img/s)")
        right.plot(x, [(r["accepted_p99_ms"] or float("nan")) / 1000 for r in rs], "o-", label=server)
    left.axhline(0.9, color="grey", ls=":", lw=1, label="goal: 90 % of goodput at 1×")
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted({r["level"] for r in rows}), labels=[f"{x}×" for x in sorted({r["level"] for r in rows})])
        ax.set_xlabel("offered load (× measured capacity)")
        ax.grid(alpha=0.3)
    left.set_ylabel("goodput ÷ goodput at 1× (images answered 200)")
    right.set_ylabel("p99 of accepted requests (s, from arrival)")
    right.set_yscale("log")
    left.legend(fontsize=7)
    fig.suptitle("Overload: open-loop arrivals past capacity")
    fig.tight_layout()
    path = save_figure(fig, path)
    plt.close(fig)
    return path
