"""Sweeps and comparisons against running servers: batch, concurrency, arrival rate, payload, protocol, Triton's
queue delay and instance count, served against raw, server against server, and cold start.

No experiment starts a server, except `cold_start`, whose subject is starting one. Ratios are measured as
interleaved A/B windows (servelab.bench.experiments.interleaved), so drift on a shared machine cancels.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence

import numpy as np

from servelab.bench.experiments.interleaved import Side, ab
from servelab.bench.experiments.point import already_measured, measure, quietly, unavailable
from servelab.bench.load.inputs import sample_tensor
from servelab.bench.load.options import LoadOpts
from servelab.bench.load.poisson import open_loop
from servelab.bench.results.records import Run, memory_snapshot
from servelab.bench.servers.handle import Served
from servelab.bench.servers.in_process import InProcess
from servelab.bench.servers.lifecycle import served
from servelab.bench.servers.triton_served import TritonJsonServed, TritonServed


def batch_sweep(run: Run, srv: Served, *, batches: tuple = (1, 2, 4, 8, 16, 32), payload: str | None = None,
                opts: LoadOpts | None = None, experiment: str = "batch-sweep", measured: Sequence[dict] = ()) -> list[dict]:
    """Throughput and latency against batch size: one caller sending batch-N requests (or the raw engine). A point
    among `measured` (see `already_measured`) is taken from there, not measured again."""
    return [already_measured(measured, srv, payload=payload, batch=b)
            or measure(run, experiment, srv, payload=payload, batch=b, concurrency=1, opts=opts) for b in batches]


def concurrency_sweep(run: Run, srv: Served, *, concurrencies: tuple = (1, 2, 4, 8, 16, 32), batch: int = 1,
                      payload: str | None = None, opts: LoadOpts | None = None,
                      experiment: str = "concurrency-sweep", measured: Sequence[dict] = ()) -> list[dict]:
    """Latency against throughput as concurrency grows (batch-1 requests by default): the server-side batching
    curve. A point among `measured` (see `already_measured`) is taken from there, not measured again."""
    return [already_measured(measured, srv, payload=payload, batch=batch, concurrency=c)
            or measure(run, experiment, srv, payload=payload, batch=batch, concurrency=c, opts=opts)
            for c in concurrencies]


def rate_sweep(run: Run, srv: Served, *, rates: tuple = (5, 10, 20, 40), payload: str | None = None,
               duration_s: float = 10.0, warmup_s: float = 2.0, max_workers: int = 64, seed: int = 0,
               drop_after_s: float | None = None, quick: bool = False, meters=(),
               experiment: str = "rate-sweep") -> list[dict]:
    """Open-loop Poisson arrivals at each rate: latency from scheduled arrival, late starts, drops and backlog."""
    payload = payload or srv.payload
    out = []
    for rate in rates:
        before = quietly(srv.snapshot)
        res = open_loop(srv.worker_factory(payload, 1), rate, duration_s=duration_s, warmup_s=warmup_s,
                        max_duration_s=None if quick else 2 * duration_s,  # repeated until three windows agree
                        max_workers=max_workers, seed=seed, drop_after_s=drop_after_s, quick=quick, meters=meters,
                        desc=f"rate {rate}/s")
        after = quietly(srv.snapshot)
        out.append(run.record(
            experiment, kind="load", server=srv.server, backend=srv.backend, engine=srv.engine,
            protocol=srv.protocol, payload=payload, batch=1, rate_rps=float(rate), server_stats=srv.delta(before, after),
            memory=memory_snapshot(srv.pid, label=f"{srv.server} server"),
            params={**srv.params(), "max_workers": max_workers, "seed": seed, "duration_s": duration_s,
                    "warmup_s": warmup_s, "drop_after_s": drop_after_s}, **res.summary()))
    return out


def payload(run: Run, srv: Served, *, batch: int = 1, concurrency: int = 4, json_lists: bool = True,
            opts: LoadOpts | None = None, experiment: str = "payload") -> list[dict]:
    """JPEG vs binary tensor to one server as an interleaved A/B (ratio JPEG ÷ tensor throughput); for Triton
    HTTP also JSON number lists (a plain point: the slow format, for its bytes and time)."""
    jpeg, tensor = (Side(f"{srv.server} {p}", srv.variant(payload=p), batch=batch, concurrency=concurrency)
                    for p in ("jpeg", "tensor"))
    out = ab(run, experiment, jpeg, tensor, opts=opts)
    if json_lists and isinstance(srv, TritonServed):
        js = TritonJsonServed(**{**vars(srv.variant(protocol="http", payload="tensor"))})
        out.append(measure(run, experiment, js, payload="json-lists", batch=batch, concurrency=concurrency, opts=opts))
    return out


# --- Triton ----------------------------------------------------------------------------------------

def http_vs_grpc(run: Run, triton: TritonServed, *, batches: tuple = (1,), concurrencies: tuple = (1, 16),
                 payload: str = "tensor", opts: LoadOpts | None = None, experiment: str = "http-grpc",
                 measured: Sequence[dict] = ()) -> list[dict]:
    """The same Triton model over gRPC and HTTP, each (batch, concurrency) an interleaved A/B (ratio gRPC ÷ HTTP).
    A point whose A/B is among `measured` (an earlier call's records: gRPC side, HTTP side, ratio) is taken from
    there, not measured again."""
    g, h = triton.variant(protocol="grpc", payload=payload), triton.variant(protocol="http", payload=payload)
    out = []
    for b in batches:
        for c in concurrencies:
            sides = (already_measured(measured, g, payload=payload, batch=b, concurrency=c),
                     already_measured(measured, h, payload=payload, batch=b, concurrency=c))
            ratio = next((r for r in measured if r.get("kind") == "ab" and all(sides)
                          and r.get("experiment") == sides[0].get("experiment") and (r.get("a"), r.get("b")) == ("grpc", "http")
                          and (r.get("batch"), r.get("concurrency")) == (b, c)), None)
            out += [*sides, ratio] if ratio else ab(run, experiment, Side("grpc", g, batch=b, concurrency=c),
                                                   Side("http", h, batch=b, concurrency=c), opts=opts)
    return out


def queue_delay_grid(run: Run, triton: TritonServed, *, delays_us: tuple = (0, 1000, 4000, 16000),
                     concurrencies: tuple = (1, 4, 16), payload: str | None = None, opts: LoadOpts | None = None,
                     experiment: str = "queue-delay", measured: Sequence[dict] = ()) -> list[dict]:
    """Dynamic-batching max queue delay × concurrency; the model is reloaded between delays and restored after.
    A point among `measured` (e.g. the sides of `queue_delays_ab`) is taken from there, not measured again."""
    return _setting_grid(run, triton, "max_queue_delay_us", delays_us, concurrencies, payload=payload, opts=opts,
                         experiment=experiment, measured=measured)


def instance_scaling(run: Run, triton: TritonServed, *, counts: tuple = (1, 2), concurrencies: tuple = (16,),
                     payload: str | None = None, opts: LoadOpts | None = None,
                     experiment: str = "instances", measured: Sequence[dict] = ()) -> list[dict]:
    """Triton instance_group count × concurrency (on CPU the analogue of the multi-GPU study); the model is
    reloaded with each count and restored after. Scaling efficiency: goals.scaling_efficiency(records). A point
    among `measured` (e.g. the sides of `instances_ab`) is taken from there, not measured again."""
    return _setting_grid(run, triton, "instances", counts, concurrencies, payload=payload, opts=opts,
                         experiment=experiment, measured=measured)


def _setting_grid(run: Run, triton: TritonServed, setting: str, values: tuple, concurrencies: tuple, *,
                  payload: str | None, opts: LoadOpts | None, experiment: str, measured: Sequence[dict]) -> list[dict]:
    """One Triton setting (`instances` or `max_queue_delay_us`) × concurrency: the model reloaded with each value
    that has a point left to measure, and restored after; a point among `measured` is taken from there."""
    out = []
    for v in values:
        at_v = dataclasses.replace(triton, **{setting: int(v)})
        known = {c: already_measured(measured, at_v, payload=payload, concurrency=c) for c in concurrencies}
        if all(known.values()):
            out += [known[c] for c in concurrencies]
            continue
        with triton.configured(**{setting: int(v)}):
            out += [known[c] or measure(run, experiment, triton, payload=payload, batch=1, concurrency=c, opts=opts)
                    for c in concurrencies]
    return out


def served_vs_raw(run: Run, srv: Served, raw: InProcess, *, concurrency: int = 16, raw_batch: int = 16,
                  payload: str = "tensor", opts: LoadOpts | None = None, experiment: str = "served-vs-raw") -> list[dict]:
    """Batch-1 requests at `concurrency` to a server vs the same engine in-process on batch `raw_batch`,
    interleaved (ratio served ÷ raw throughput): what the serving layer and its batcher keep of the engine."""
    return ab(run, experiment, Side(f"{srv.server} c={concurrency}", srv, payload, concurrency=concurrency),
              Side(f"raw batch {raw_batch}", raw, "tensor", batch=raw_batch), opts=opts)


def compare_servers(run: Run, a: Served, b: Served, *, concurrencies: tuple = (1, 16), payload: str | None = None,
                    batch: int = 1, opts: LoadOpts | None = None, experiment: str = "servers") -> list[dict]:
    """Two servers, same requests, interleaved at each concurrency (ratio a ÷ b): servelab vs LitServe,
    batching on vs off (two servers configured differently), …"""
    out = []
    for c in concurrencies:
        out += ab(run, experiment, Side(a.server, a, payload, batch, c), Side(b.server, b, payload, batch, c),
                  opts=opts)
    return out


# --- cold start ---------------------------------------------------------------------------------------

def cold_start(run: Run, *, servers: tuple = ("fastapi", "litserve", "triton-http"), engine: str = "onnx",
               repeats: int = 3, log_dir=None, experiment: str = "cold-start") -> list[dict]:
    """Process start to ready (the server's readiness probe), then the first request's latency: one record per
    server over `repeats` fresh starts (median, with min and max: one start is one sample of a noisy machine).
    The one experiment that starts servers: starting is what it measures."""
    out = []
    for server in servers:
        starts, firsts = [], []
        try:
            for _ in range(max(1, repeats)):
                log = (log_dir or run.dir) / f"{server}.log"
                with served(server, engine=engine, payload="tensor", log_path=log) as srv:
                    client = srv.make_client()
                    t1 = time.perf_counter()
                    client.embed_tensor(sample_tensor(1))
                    firsts.append((time.perf_counter() - t1) * 1000)
                    client.close()
                    starts.append(srv.startup_s)
                    mem = memory_snapshot(srv.pid, label=f"{server} server")  # the last start's
        except Exception as exc:
            out.append(unavailable(run, experiment, server, exc))
            continue
        out.append(run.record(experiment, kind="cold-start", server=server, backend=srv.backend,
                              engine=srv.engine, protocol=srv.protocol, payload="tensor", batch=1,
                              start_to_ready_s=round(float(np.median(starts)), 3),
                              start_to_ready_min_s=round(min(starts), 3), start_to_ready_max_s=round(max(starts), 3),
                              first_request_ms=round(float(np.median(firsts)), 2),
                              latency_p50_ms=round(float(np.median(firsts)), 2),
                              latency_p50_min_ms=round(min(firsts), 2), latency_p50_max_ms=round(max(firsts), 2),
                              repeats=len(starts), memory=mem,
                              params={**srv.params(), "probe": {"fastapi": "/readyz", "litserve": "/health"}.get(
                                  server, "/v2/health/ready (strict readiness)")}))
    return out
