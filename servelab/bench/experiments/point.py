"""One point against a server: a closed loop with the server's own counters read around it, written as a record.

    measure(run, experiment, srv, payload=…, batch=1, concurrency=1, opts=LoadOpts()) -> record

Every experiment takes a `Run` (results/<run-id>/), one or more server handles (servelab.bench.servers:
`served(...)` starts one, `attach(...)` points at a running one) and `opts` (a LoadOpts: how a point is
measured), and returns the records it wrote. The helpers here are what they share.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence

from servelab.bench.load.closed import closed_loop
from servelab.bench.load.inputs import payload_bytes
from servelab.bench.load.options import LoadOpts
from servelab.bench.results.records import Run, memory_snapshot
from servelab.bench.servers.handle import Served
from servelab.bench.servers.in_process import InProcess


def quietly(fn):
    try:
        return fn()
    except Exception:
        return None


def point_fields(run: Run, srv: Served, *, payload: str, batch: int, concurrency: int, opts: LoadOpts,
                  params: dict | None, stats: dict | None, summary: dict) -> dict:
    return dict(
        kind="raw" if isinstance(srv, InProcess) else "load", server=srv.server, backend=srv.backend,
        engine=srv.engine, provider=(srv.params().get("provider") if isinstance(srv, InProcess) else None),
        protocol=srv.protocol, payload=payload, batch=batch, concurrency=concurrency, server_stats=stats,
        memory=memory_snapshot(srv.pid, label=f"{srv.server} server") if srv.pid else
        memory_snapshot(label="this process" + (" (engine in-process)" if isinstance(srv, InProcess) else "")),
        params={**srv.params(), "load": opts.as_params(), **(params or {})},
        payload_bytes_per_request=payload_bytes(payload, batch), **summary,
    )


def counted_delta(srv: Served, before: dict | None, ok: int, wait_s: float = 2.0) -> dict | None:
    """The server's counter delta once it has counted the `ok` answers the client got (a server may update its
    statistics just after sending the response)."""
    deadline = time.perf_counter() + wait_s
    while True:
        d = srv.delta(before, quietly(srv.snapshot))
        if d is None or (d.get("requests_ok") or 0) >= ok or time.perf_counter() > deadline:
            return d
        time.sleep(0.05)


def measure(run: Run, experiment: str, srv: Served, *, payload: str | None = None, batch: int = 1,
            concurrency: int = 1, opts: LoadOpts | None = None, params: dict | None = None, meters=(),
            **fields) -> dict:
    """One closed-loop point against a server (or the in-process engine), with the server's own counters as
    before/after deltas; returns the record written."""
    opts = opts or LoadOpts()
    payload = payload or srv.payload
    before = quietly(srv.snapshot)
    res = closed_loop(srv.worker_factory(payload, batch), concurrency, opts, meters=meters,
                      desc=f"{experiment} {srv.server} b={batch} c={concurrency}")
    return run.record(experiment, **point_fields(run, srv, payload=payload, batch=batch, concurrency=concurrency,
                                                  opts=opts, params=params,
                                                  stats=counted_delta(srv, before, res.ok_total),
                                                  summary=res.summary()), **fields)


def local_pid(srv: Served) -> int | None:
    """The process to keep quiet while the other side runs: the server's, or this one for the in-process engine."""
    return os.getpid() if isinstance(srv, InProcess) else srv.pid


def merge_deltas(deltas: list) -> dict | None:
    """Sum the server-counter deltas of several windows: counts add up, averages (floats) are weighted by the
    requests each window served, nested dicts merge the same way."""
    ds = [d for d in deltas if d]
    if not ds:
        return None
    weights = [d.get("requests_ok") or (d["requests"] if isinstance(d.get("requests"), int) else 0) for d in ds]
    out = {}
    for key in dict.fromkeys(k for d in ds for k in d):
        vals = [d.get(key) for d in ds]
        present = [v for v in vals if v is not None]
        if present and all(isinstance(v, dict) for v in present):
            out[key] = merge_deltas(present)
        elif present and all(isinstance(v, int) and not isinstance(v, bool) for v in present):
            out[key] = sum(present)
        elif all(v is None or isinstance(v, (int, float)) for v in vals) and any(isinstance(v, float) for v in vals):
            pairs = [(v, w) for v, w in zip(vals, weights, strict=True) if v is not None]
            total = sum(w for _, w in pairs)
            out[key] = round(sum(v * w for v, w in pairs) / total, 4) if total else (pairs[-1][0] if pairs else None)
        else:
            out[key] = vals[-1]
    return out


def already_measured(measured: Sequence[dict], srv: Served, *, payload: str | None = None, batch: int = 1,
                     concurrency: int = 1) -> dict | None:
    """The record of this point among `measured` (typically the two sides of an `ab` this run already took), so
    a sweep uses it instead of measuring the same point again minutes later: same server, engine, payload,
    batch, concurrency and Triton configuration (instances, queue delay)."""
    payload = payload or srv.payload
    conf = {k: srv.params().get(k) for k in ("instances", "max_queue_delay_us", "max_batch")}
    for r in measured:
        if (r.get("kind") in ("load", "raw") and r.get("server") == srv.server and r.get("engine") == srv.engine
                and r.get("payload") == payload and r.get("batch") == batch and r.get("concurrency") == concurrency
                and all(r.get("params", {}).get(k) == v for k, v in conf.items())):
            return r
    return None


def unavailable(run: Run, experiment: str, server: str, exc: Exception, **fields) -> dict:
    """A record saying a step could not run here, and why."""
    return run.record(experiment, kind="unavailable", server=server, available=False,
                      note=f"{type(exc).__name__}: {exc}"[:400], **fields)
