"""The course's benchmarks: each a few experiments and the goals they are judged by.

    service(run, srv), triton(run, triton_srv), peer_baseline(run, [srv, …])
"""

from __future__ import annotations

from servelab.bench.experiments.point import measure
from servelab.bench.experiments.sweeps import compare_servers, concurrency_sweep, http_vs_grpc, payload, served_vs_raw
from servelab.bench.load.options import LoadOpts
from servelab.bench.results.records import Run
from servelab.bench.servers.handle import Served
from servelab.bench.servers.lifecycle import served
from servelab.bench.servers.triton_served import TritonServed


def service(run: Run, srv: Served, *, raw_batches: tuple = (1, 16), concurrencies: tuple = (1, 16),
            payload: str = "tensor", threads: int = 0, opts: LoadOpts | None = None) -> list[dict]:
    """A FastAPI service against its own engine in-process: its p50 at the lowest concurrency, and served ÷ raw
    batch-N throughput at the highest, interleaved. With `raw_engines(…, experiment="service")` beside it, the
    inputs of goals.service_goals."""
    lo, hi, big = min(concurrencies), max(concurrencies), max(raw_batches)
    out = [measure(run, "service", srv, payload=payload, batch=1, concurrency=lo, opts=opts)]
    with served("in-process", engine=srv.engine, threads=threads) as raw:
        out += served_vs_raw(run, srv, raw, concurrency=hi, raw_batch=big, payload=payload, opts=opts,
                             experiment="service")
    return out


def triton(run: Run, triton_srv: TritonServed, *, concurrency: int = 16, offline_batch: int = 16, threads: int = 0,
           opts: LoadOpts | None = None) -> list[dict]:
    """Triton batch-1 at `concurrency` vs the offline ONNX engine at batch `offline_batch`, gRPC vs HTTP and
    JPEG vs tensor — every ratio interleaved. Goals: goals.triton_goals."""
    from servelab.bench.results.goals import triton_goals

    out = []
    with served("in-process", engine="onnx", threads=threads) as raw:
        for proto in ("grpc", "http"):
            out += served_vs_raw(run, triton_srv.variant(protocol=proto, payload="tensor"), raw,
                                 concurrency=concurrency, raw_batch=offline_batch, opts=opts, experiment="triton")
    out += http_vs_grpc(run, triton_srv, concurrencies=(concurrency,), opts=opts, experiment="triton")
    for proto in ("grpc", "http"):
        out += payload(run, triton_srv.variant(protocol=proto), concurrency=concurrency, json_lists=False, opts=opts,
                       experiment="triton")
    return out + triton_goals(run, out, concurrency=concurrency, offline_batch=offline_batch)


def peer_baseline(run: Run, servers: list[Served], *, concurrencies: tuple = (1, 16), payload: str = "jpeg",
                  opts: LoadOpts | None = None, experiment: str = "peer-baseline") -> list[dict]:
    """servelab's service vs LitServe (interleaved, ratio servelab ÷ LitServe), then every other server given,
    same engine, same requests. Goals: goals.peer_goals."""
    from servelab.bench.results.goals import peer_goals

    by = {s.server: s for s in servers}
    out = []
    if "fastapi" in by and "litserve" in by:
        out += compare_servers(run, by["fastapi"], by["litserve"], concurrencies=concurrencies, payload=payload,
                               opts=opts, experiment=experiment)
    for s in servers:
        if s.server not in ("fastapi", "litserve") or not ("fastapi" in by and "litserve" in by):
            out += concurrency_sweep(run, s, concurrencies=concurrencies, payload=payload, opts=opts,
                                     experiment=experiment)
    return out + peer_goals(run, out, concurrency=max(concurrencies))
