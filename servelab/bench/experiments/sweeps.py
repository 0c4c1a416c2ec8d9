"""Named experiments: each answers one question against servers that are already running, and writes records.

Every experiment takes a `Run` (results/<run-id>/), one or more server handles (servelab.bench.servers:
`served(...)` starts one, `attach(...)` points at a running one) and `opts` (a LoadOpts: how a point is
measured), and returns the records it wrote (`records_frame(records)` makes a DataFrame). No experiment starts a
server, except `cold_start`, whose subject is starting one. Ratios are measured as interleaved A/B windows
(`ab`), so drift on a shared machine cancels. Pass/fail goals are in servelab.bench.goals; tables in report.
"""

from __future__ import annotations

import dataclasses
import gc
import io
import json
import os
import time
from collections.abc import Callable, Sequence

import numpy as np

from servelab.bench.idle import IdleSides
from servelab.bench.inputs import payload_bytes, sample_jpegs, sample_tensor
from servelab.bench.loadgen import LoadOpts, closed_loop, interleaved, open_loop
from servelab.bench.records import Run, memory_snapshot
from servelab.bench.servers import InProcess, Served, TritonJsonServed, TritonServed, make_embedder, served
from servelab.bench.stats import latency_summary

ENGINES = ("torch", "onnx", "onnx-int8")
PROVIDERS = ("cpu", "cuda", "tensorrt")


def _safe(fn):
    try:
        return fn()
    except Exception:
        return None


def _point_fields(run: Run, srv: Served, *, payload: str, batch: int, concurrency: int, opts: LoadOpts,
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


def _counted(srv: Served, before: dict | None, ok: int, wait_s: float = 2.0) -> dict | None:
    """The server's counter delta once it has counted the `ok` answers the client got (a server may update its
    statistics just after sending the response)."""
    deadline = time.perf_counter() + wait_s
    while True:
        d = srv.delta(before, _safe(srv.snapshot))
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
    before = _safe(srv.snapshot)
    res = closed_loop(srv.worker_factory(payload, batch), concurrency, opts, meters=meters,
                      desc=f"{experiment} {srv.server} b={batch} c={concurrency}")
    return run.record(experiment, **_point_fields(run, srv, payload=payload, batch=batch, concurrency=concurrency,
                                                  opts=opts, params=params,
                                                  stats=_counted(srv, before, res.ok_total),
                                                  summary=res.summary()), **fields)


def ab(run: Run, experiment: str, a: Served, b: Served, *, label_a: str, label_b: str, payload_a: str | None = None,
       payload_b: str | None = None, batch_a: int = 1, batch_b: int = 1, concurrency_a: int = 1,
       concurrency_b: int | None = None, opts: LoadOpts | None = None, params: dict | None = None,
       meters=(), prepare: Callable[[int], bool | None] | None = None, pause_idle: bool = True) -> list[dict]:
    """Interleaved A/B: windows of A and B alternate in one sequence; writes A's and B's records and an `ab`
    record (kind "ab": A ÷ B throughput, with the min–max of the per-pair ratios and whether they settled).

    When A and B are two live servers, the one waiting would take CPU from the one measured: each side's idle
    cost (`idle_cpu_pct`, % of one core, measured before the first window) goes into the records, and a side
    this machine started is stopped during the other side's warm-up and windows (servelab.bench.idle;
    `idle_side` says what was done, or why not; `pause_idle=False` only records the cost).

    Each side's server counters are read around each of its windows (while both sides are idle) and summed,
    so a server shared by A and B (same server, other payload or protocol) still gets per-side figures.
    `prepare(side)` (0 = A, 1 = B) runs before each of that side's windows while nothing is in flight: the
    place to switch one server between two configurations (e.g. batching on and off) so they interleave too;
    when it returns True (it changed something), the side warms up again before its window.
    """
    opts = opts or LoadOpts()
    pa, pb = payload_a or a.payload, payload_b or b.payload
    cb = concurrency_b or concurrency_a
    handles, snaps, deltas = (a, b), [None, None], ([], [])

    def on_window(k: int, phase: str) -> bool:
        if phase in ("warm-up", "start"):
            idle.run_only(k)  # side k's server continues, the other's process group stops
        changed = bool(prepare(k)) if prepare and phase in ("warm-up", "start") else False
        if phase == "start":
            snaps[k] = _safe(handles[k].snapshot)
        elif phase == "end":
            deltas[k].append(handles[k].delta(snaps[k], _safe(handles[k].snapshot)))
        return changed

    with IdleSides([_local_pid(a), _local_pid(b)], [label_a, label_b], pause=pause_idle,
                   probe_s=0.25 if opts.quick else 2.0) as idle:
        res = interleaved(a.worker_factory(pa, batch_a), b.worker_factory(pb, batch_b), concurrency_a, opts,
                          concurrency_b=cb, meters=meters, on_window=on_window, reconfigures=prepare is not None,
                          desc=f"{experiment} {label_a} / {label_b}")
    extra = {"ab": {"pairs": res.pairs, "order": "ABBA", "a": label_a, "b": label_b}, **(params or {})}
    ra = run.record(experiment, **_point_fields(
        run, a, payload=pa, batch=batch_a, concurrency=concurrency_a, opts=opts, params={**extra, "side": "a"},
        stats=merge_deltas(deltas[0]), summary=res.a.summary()), **idle.record_fields(0))
    rb = run.record(experiment, **_point_fields(
        run, b, payload=pb, batch=batch_b, concurrency=cb, opts=opts, params={**extra, "side": "b"},
        stats=merge_deltas(deltas[1]), summary=res.b.summary()), **idle.record_fields(1))
    s = res.summary()
    # what both sides had in common (the link, Triton's instances…) names the ratio's point too
    shared = {k: v for k, v in ra["params"].items() if k not in ("load", "side") and rb["params"].get(k, ...) == v}
    machines = [r["params"].get("served_by") for r in (ra, rb)]
    if "served_by" not in shared and all(machines):  # a ratio of two machines names both
        shared["served_by"] = f"A: {machines[0]}; B: {machines[1]}"
    rr = run.record(experiment, kind="ab", server=f"{label_a} / {label_b}", ratio=s["ratio"],
                    ratio_min=s["ratio_min"], ratio_max=s["ratio_max"], latency_p50_ratio=s["latency_p50_ratio"],
                    stable=s["stable"], settled_by=s["settled_by"], repeats=s["pairs"], quick=s["quick"], a=label_a,
                    b=label_b,
                    engine=a.engine if a.engine == b.engine else None,
                    protocol=a.protocol if a.protocol == b.protocol else None,
                    payload=pa if pa == pb else None,
                    batch=batch_a if batch_a == batch_b else None,
                    concurrency=concurrency_a if concurrency_a == cb else None,
                    params={**shared, "load": opts.as_params(), **extra},
                    idle_cpu_pct_a=ra["idle_cpu_pct"], idle_cpu_pct_b=rb["idle_cpu_pct"],
                    idle_paused_a=ra["idle_paused"], idle_paused_b=rb["idle_paused"],
                    idle_side_a=ra["idle_side"], idle_side_b=rb["idle_side"],
                    note="throughput A ÷ B, interleaved windows; min–max over the window pairs; idle_cpu_pct_a/_b: "
                         "% of one core each side used while idle, before the windows; idle_paused_a/_b, idle_side_a/_b: "
                         "whether each side was stopped during the other's windows, and how or why not")
    return [ra, rb, rr]


def _local_pid(srv: Served) -> int | None:
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


# --- in-process engines ---------------------------------------------------------------------------

def _torch_reference(engines: tuple, threads: int = 0):
    """torch fp32 (CPU) embeddings of 8 synthetic photos: the reference every engine's cosine is taken against."""
    if "torch" not in engines:
        return None
    from servelab.config import Settings
    from servelab.model.engines import make_embedder as build

    # fp32 whatever SERVELAB_PRECISION says: a half-precision run is compared with the fp32 model, not with itself
    emb = build(Settings.from_env(), engine="torch", provider="cpu", precision="fp32", threads=threads or None)
    ref = emb.embed(sample_tensor(8))
    del emb
    gc.collect()
    return ref


def raw_engines(run: Run, *, engines: tuple = ENGINES, providers: tuple = ("cpu",), batches: tuple = (1, 8, 16, 32),
            threads: int = 0, opts: LoadOpts | None = None, experiment: str = "engines") -> list[dict]:
    """Raw in-process throughput of torch fp32 / ORT fp32 / ORT int8 per execution provider and batch size.

    One engine is loaded at a time, compared with torch fp32 (cosine_vs_torch_fp32, min over 8 photos), measured
    at each batch size, then released. A provider that is not present here gets a record with available=false
    and the reason, instead of a silent CPU fallback.
    """
    from servelab.model.export import cosine_rows

    out = []
    ref = _torch_reference(tuple(engines), threads)
    for provider in providers:
        for engine in engines:
            try:
                emb = make_embedder(engine, provider, threads)
            except Exception as exc:
                out.append(run.record(experiment, kind="unavailable", server="in-process", backend="local",
                                      engine=engine, provider=provider, available=False,
                                      note=f"{type(exc).__name__}: {exc}"[:400]))
                continue
            cos = float(cosine_rows(ref, emb.embed(sample_tensor(8))).min()) if ref is not None else None
            raw = InProcess(server="in-process", engine=emb.engine, url=None, protocol="inproc", embedder=emb)
            for b in batches:
                out.append(measure(run, experiment, raw, payload="tensor", batch=b, opts=opts,
                                   cosine_vs_torch_fp32=cos, precision=getattr(emb, "precision", None)))
            del emb, raw
            gc.collect()
    return out


# --- sweeps ---------------------------------------------------------------------------------------

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
        before = _safe(srv.snapshot)
        res = open_loop(srv.worker_factory(payload, 1), rate, duration_s=duration_s, warmup_s=warmup_s,
                        max_duration_s=None if quick else 2 * duration_s,  # repeated until three windows agree
                        max_workers=max_workers, seed=seed, drop_after_s=drop_after_s, quick=quick, meters=meters,
                        desc=f"rate {rate}/s")
        after = _safe(srv.snapshot)
        out.append(run.record(
            experiment, kind="load", server=srv.server, backend=srv.backend, engine=srv.engine,
            protocol=srv.protocol, payload=payload, batch=1, rate_rps=float(rate), server_stats=srv.delta(before, after),
            memory=memory_snapshot(srv.pid, label=f"{srv.server} server"),
            params={**srv.params(), "max_workers": max_workers, "seed": seed, "duration_s": duration_s,
                    "warmup_s": warmup_s, "drop_after_s": drop_after_s}, **res.summary()))
    return out


# --- payload & serialisation --------------------------------------------------------------------------

# a format's repeats stop once they have taken this long (after at least MIN_REPEATS): JSON number lists at batch 16
# take about 1.7 s per body on two cores, and ten of them were a quarter of a minute for a figure three already give
REPEAT_BUDGET_S = 1.0
MIN_REPEATS = 3


def serialisation_costs(batch: int = 1, repeats: int = 20, budget_s: float = REPEAT_BUDGET_S) -> list[dict]:
    """Client-side cost of each wire format, measured apart from any request: encode time and bytes per request.
    Each format is built up to `repeats` times, fewer (at least MIN_REPEATS) once its builds took `budget_s`."""
    import base64

    x = sample_tensor(batch)
    jpegs = list(sample_jpegs(batch))

    def json_lists():
        return json.dumps({"inputs": [{"name": "pixel_values", "shape": list(x.shape), "datatype": "FP32",
                                       "data": x.ravel().tolist()}]}).encode()

    def binary_tensor():
        return np.ascontiguousarray(x, dtype="<f4").tobytes()

    def jpeg_bytes():
        return b"".join(jpegs)  # the files as they are: no re-encode

    def jpeg_from_pixels():  # decode + re-encode, when the client holds pixels rather than files
        from PIL import Image

        out = []
        for j in jpegs:
            buf = io.BytesIO()
            Image.open(io.BytesIO(j)).convert("RGB").save(buf, format="JPEG", quality=90)
            out.append(buf.getvalue())
        return b"".join(out)

    def base64_json():
        return json.dumps({"images": [base64.b64encode(j).decode() for j in jpegs]}).encode()

    def client_preprocess():  # what payload=tensor costs the client before serialising
        from servelab.model.preprocess import preprocess_batch

        return preprocess_batch(jpegs).tobytes()

    rows = []
    for name, fn, note in (
        ("json-lists", json_lists, "KServe v2 JSON with the tensor as nested number lists"),
        ("binary-tensor", binary_tensor, "float32 bytes (Triton binary extension / servelab /embed/tensor)"),
        ("jpeg", jpeg_bytes, "the JPEG files as they are"),
        ("jpeg-reencode", jpeg_from_pixels, "decode + re-encode JPEG q90"),
        ("base64-json", base64_json, "servelab /embed/base64 and LitServe bodies"),
        ("preprocess+binary", client_preprocess, "decode + resize + normalise on the client, then float32 bytes"),
    ):
        fn()
        times = []
        while len(times) < repeats and (len(times) < min(MIN_REPEATS, repeats) or sum(times) < budget_s):
            t0 = time.perf_counter()
            body = fn()
            times.append(time.perf_counter() - t0)
        lat = latency_summary(times)
        rows.append({"payload": name, "repeats": len(times), "bytes_per_request": len(body),
                     "bytes_per_image": len(body) / batch,
                     "serialise_p50_ms": lat["latency_p50_ms"], "serialise_p99_ms": lat["latency_p99_ms"],
                     "serialise_min_ms": lat["latency_min_ms"], "serialise_max_ms": lat["latency_max_ms"],
                     "note": note})
    return rows


def serialisation(run: Run, *, batches: tuple = (1,), repeats: int = 20,
                  experiment: str = "serialisation") -> list[dict]:
    """serialisation_costs for each batch size, as records (no request is sent)."""
    out = []
    for b in batches:
        for row in serialisation_costs(b, repeats=repeats):
            out.append(run.record(experiment, kind="serialisation", server="client", payload=row["payload"], batch=b,
                                  latency_p50_ms=row["serialise_p50_ms"], latency_p99_ms=row["serialise_p99_ms"],
                                  latency_p50_min_ms=row["serialise_min_ms"], latency_p50_max_ms=row["serialise_max_ms"],
                                  bytes_per_request=row["bytes_per_request"], bytes_per_image=row["bytes_per_image"],
                                  repeats=row["repeats"], note=row["note"], memory=memory_snapshot(label="client process")))
    return out


def payload(run: Run, srv: Served, *, batch: int = 1, concurrency: int = 4, json_lists: bool = True,
            opts: LoadOpts | None = None, experiment: str = "payload") -> list[dict]:
    """JPEG vs binary tensor to one server as an interleaved A/B (ratio JPEG ÷ tensor throughput); for Triton
    HTTP also JSON number lists (a plain point: the slow format, for its bytes and time)."""
    out = ab(run, experiment, srv.variant(payload="jpeg"), srv.variant(payload="tensor"), label_a=f"{srv.server} jpeg",
             label_b=f"{srv.server} tensor", batch_a=batch, batch_b=batch, concurrency_a=concurrency, opts=opts)
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
            out += [*sides, ratio] if ratio else ab(run, experiment, g, h, label_a="grpc", label_b="http", batch_a=b,
                                                   batch_b=b, concurrency_a=c, opts=opts)
    return out


def queue_delay_grid(run: Run, triton: TritonServed, *, delays_us: tuple = (0, 1000, 4000, 16000),
                     concurrencies: tuple = (1, 4, 16), payload: str | None = None, opts: LoadOpts | None = None,
                     experiment: str = "queue-delay", measured: Sequence[dict] = ()) -> list[dict]:
    """Dynamic-batching max queue delay × concurrency; the model is reloaded between delays and restored after.
    A point among `measured` (e.g. the sides of `queue_delays_ab`) is taken from there, not measured again."""
    return _setting_grid(run, triton, "max_queue_delay_us", delays_us, concurrencies, payload=payload, opts=opts,
                         experiment=experiment, measured=measured)


def queue_delays_ab(run: Run, triton: TritonServed, *, delays_us: tuple[int, int] = (4000, 0), concurrency: int = 8,
                    payload: str | None = None, opts: LoadOpts | None = None,
                    experiment: str = "queue-delay-ab") -> list[dict]:
    """Two queue delays of one Triton model in alternating windows at one concurrency (ratio A ÷ B), like
    `instances_ab`: a grid measures the delays minutes apart, so the machine's drift is in their ratio; here it
    cancels."""
    return _settings_ab(run, triton, "max_queue_delay_us", delays_us, [f"delay {d} µs" for d in delays_us],
                        concurrency=concurrency, payload=payload, opts=opts, experiment=experiment)


def instance_scaling(run: Run, triton: TritonServed, *, counts: tuple = (1, 2), concurrencies: tuple = (16,),
                     payload: str | None = None, opts: LoadOpts | None = None,
                     experiment: str = "instances", measured: Sequence[dict] = ()) -> list[dict]:
    """Triton instance_group count × concurrency (on CPU the analogue of the multi-GPU study); the model is
    reloaded with each count and restored after. Scaling efficiency: goals.scaling_efficiency(records). A point
    among `measured` (e.g. the sides of `instances_ab`) is taken from there, not measured again."""
    return _setting_grid(run, triton, "instances", counts, concurrencies, payload=payload, opts=opts,
                         experiment=experiment, measured=measured)


def instances_ab(run: Run, triton: TritonServed, *, instances: tuple[int, int] = (2, 1), concurrency: int = 8,
                 payload: str | None = None, opts: LoadOpts | None = None,
                 experiment: str = "instances-ab") -> list[dict]:
    """Two instance counts of one Triton model in alternating windows at one concurrency (ratio A ÷ B): the
    model is reloaded with A's or B's count when the side changes, and restored after. A sweep measures the
    counts minutes apart, so the machine's drift is in its ratio; here it cancels."""
    labels = [f"{n} instance{'' if n == 1 else 's'}" for n in instances]
    return _settings_ab(run, triton, "instances", instances, labels, concurrency=concurrency, payload=payload,
                        opts=opts, experiment=experiment)


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


def _settings_ab(run: Run, triton: TritonServed, setting: str, values: tuple[int, int], labels: list[str], *,
                 concurrency: int, payload: str | None, opts: LoadOpts | None, experiment: str) -> list[dict]:
    """`ab` of two values of one Triton setting (`instances` or `max_queue_delay_us`) on one model, reloaded with
    a side's value when the side changes and restored after; each side's records name its value."""
    from servelab.triton.control import config_switch, config_with

    sides = [dataclasses.replace(triton, **{setting: int(v)}) for v in values]
    configs = [config_with(triton.http_url, triton.model, **{setting: int(v)}) for v in values]
    with config_switch(triton.http_url, triton.model, configs) as use:
        return ab(run, experiment, *sides, label_a=labels[0], label_b=labels[1], payload_a=payload,
                  payload_b=payload, concurrency_a=concurrency, opts=opts, prepare=use)


def served_vs_raw(run: Run, srv: Served, raw: InProcess, *, concurrency: int = 16, raw_batch: int = 16,
                  payload: str = "tensor", opts: LoadOpts | None = None, experiment: str = "served-vs-raw") -> list[dict]:
    """Batch-1 requests at `concurrency` to a server vs the same engine in-process on batch `raw_batch`,
    interleaved (ratio served ÷ raw throughput): what the serving layer and its batcher keep of the engine."""
    return ab(run, experiment, srv, raw, label_a=f"{srv.server} c={concurrency}", label_b=f"raw batch {raw_batch}",
              payload_a=payload, payload_b="tensor", batch_a=1, batch_b=raw_batch, concurrency_a=concurrency,
              concurrency_b=1, opts=opts)


def compare_servers(run: Run, a: Served, b: Served, *, concurrencies: tuple = (1, 16), payload: str | None = None,
                    batch: int = 1, opts: LoadOpts | None = None, experiment: str = "servers") -> list[dict]:
    """Two servers, same requests, interleaved at each concurrency (ratio a ÷ b): servelab vs LitServe,
    batching on vs off (two servers configured differently), …"""
    out = []
    for c in concurrencies:
        out += ab(run, experiment, a, b, label_a=a.server, label_b=b.server, payload_a=payload, payload_b=payload,
                  batch_a=batch, batch_b=batch, concurrency_a=c, opts=opts)
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


def unavailable(run: Run, experiment: str, server: str, exc: Exception, **fields) -> dict:
    """A record saying a step could not run here, and why."""
    return run.record(experiment, kind="unavailable", server=server, available=False,
                      note=f"{type(exc).__name__}: {exc}"[:400], **fields)


# --- ONNX Runtime profiling ---------------------------------------------------------------------------

def ort_profile(run: Run, *, engine: str = "onnx", provider: str = "cpu", batch: int = 8, iterations: int = 5,
                threads: int = 0, experiment: str = "ort-profile") -> list[dict]:
    """Share of ORT kernel time by op type, and which execution provider ran each node (the CPU-fallback check)."""
    import os
    import shutil
    import tempfile

    import onnxruntime as ort

    from servelab.config import Settings
    from servelab.model.engines import ort_providers
    from servelab.model.export import ensure_exported

    meta = ensure_exported(Settings.from_env())
    path = meta["path"] if engine == "onnx" else meta["int8"]["path"]
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.enable_profiling = True
    if threads:
        so.intra_op_num_threads = threads
    tmp = tempfile.mkdtemp(prefix="ortprof-")
    so.profile_file_prefix = os.path.join(tmp, "ort")
    try:
        sess = ort.InferenceSession(str(path), sess_options=so, providers=ort_providers(provider))
    except Exception as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        return [unavailable(run, experiment, "in-process", exc, engine=engine, provider=provider)]
    x = sample_tensor(batch)
    name = sess.get_inputs()[0].name
    for _ in range(2):
        sess.run(None, {name: x})
    for _ in range(max(1, iterations)):
        sess.run(None, {name: x})
    prof = sess.end_profiling()
    with open(prof) as fh:
        events = json.load(fh)
    shutil.rmtree(tmp, ignore_errors=True)  # a few MB of trace per call; the record keeps what matters
    by_op: dict[str, float] = {}
    by_provider: dict[str, int] = {}
    node_provider: dict[str, str] = {}
    for ev in events:
        if ev.get("cat") != "Node" or not ev.get("name", "").endswith("_kernel_time"):
            continue
        args = ev.get("args", {})
        op = args.get("op_name", "?")
        by_op[op] = by_op.get(op, 0.0) + ev.get("dur", 0) / 1000.0
        node = ev["name"][: -len("_kernel_time")]
        prov = args.get("provider", "?")
        if node not in node_provider:
            node_provider[node] = prov
            by_provider[prov] = by_provider.get(prov, 0) + 1
    total = sum(by_op.values()) or 1.0
    shares = {op: round(ms / total, 4) for op, ms in sorted(by_op.items(), key=lambda kv: -kv[1])}
    cpu_fallback = [n for n, p in node_provider.items() if p == "CPUExecutionProvider"] if provider != "cpu" else []
    return [run.record(
        experiment, kind="profile", server="in-process", backend="local", engine=engine, provider=provider,
        protocol="inproc", payload="tensor", batch=batch, repeats=iterations,
        op_time_share=shares, op_time_ms={k: round(v, 3) for k, v in by_op.items()},
        nodes_by_provider=by_provider, cpu_fallback_nodes=cpu_fallback[:50], n_cpu_fallback_nodes=len(cpu_fallback),
        active_providers=sess.get_providers(), memory=memory_snapshot(label="this process"),
        note=f"profile events from {len(events)} entries; share of summed kernel time",
    )]


# --- the course's benchmarks (each a few experiments + goals) ------------------------------------------

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
    from servelab.bench.goals import triton_goals

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
    from servelab.bench.goals import peer_goals

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
