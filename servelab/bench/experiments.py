"""Named experiments: each measures one question and writes records into a Run (results/<run-id>/).

Every function takes keyword parameters, accepts `run=` (a Run, a run id, or None for a new run), writes one
record per measurement and returns the list of records (`records_frame(records)` makes a DataFrame). `quick=True`
shrinks warm-up and windows so a smoke run takes seconds; the numbers from a quick run are not results.
"""

from __future__ import annotations

import gc
import io
import json
import time
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from servelab.bench.loadgen import client_factory, closed_loop, embedder_factory, open_loop
from servelab.bench.records import Run, memory_snapshot
from servelab.bench.stats import latency_summary
from servelab.bench.targets import served

ENGINES = ("torch", "onnx", "onnx-int8")
PROVIDERS = ("cpu", "cuda", "tensorrt")


@dataclass(frozen=True)
class LoadOpts:
    """How long to measure: warm-up (excluded), window length, window cap, stability tolerance, or a request count."""

    warmup_s: float = 2.0
    window_s: float = 3.0
    max_windows: int = 10
    tolerance: float = 0.1
    requests: int | None = None
    min_window_requests: int = 5
    progress: bool = True
    label: str = "full"  # "quick": a smoke run, its numbers are not results

    @classmethod
    def quick(cls, **kw) -> "LoadOpts":
        return cls(**{"warmup_s": 0.3, "window_s": 0.6, "max_windows": 3, "tolerance": 0.25, "min_window_requests": 2,
                      "label": "quick", **kw})

    def as_params(self) -> dict:
        return {"warmup_s": self.warmup_s, "window_s": self.window_s, "max_windows": self.max_windows,
                "tolerance": self.tolerance, "requests": self.requests, "label": self.label}


def _opts(quick: bool, opts: LoadOpts | None, window_s: float | None = None) -> LoadOpts:
    o = opts or (LoadOpts.quick() if quick else LoadOpts())
    return replace(o, window_s=window_s) if window_s else o


def _run(run, name: str) -> Run:
    if isinstance(run, Run):
        return run
    return Run(run_id=run, name=name)


# --- inputs ------------------------------------------------------------------------------------------

@lru_cache(maxsize=8)
def sample_jpegs(n: int, seed: int = 0, size: tuple[int, int] = (640, 480)) -> tuple[bytes, ...]:
    """n distinct synthetic photo-like JPEGs (generated, deterministic)."""
    from servelab.data import encode, synthetic_photo

    return tuple(encode(synthetic_photo(seed + i, size)) for i in range(n))


@lru_cache(maxsize=8)
def sample_tensor(n: int, seed: int = 0) -> np.ndarray:
    from servelab.model.preprocess import preprocess_batch

    return preprocess_batch(list(sample_jpegs(n, seed)))


def _payload_factory(srv, payload: str, batch: int):
    if payload in ("tensor", "json-lists"):  # json-lists: a tensor the client serialises as JSON numbers
        return client_factory(srv.make_client, tensor=sample_tensor(batch))
    return client_factory(srv.make_client, blobs=list(sample_jpegs(batch)))


def _load_fields(res) -> dict:
    s = res.summary()
    return {k: v for k, v in s.items()}


def measure_served(run: Run, experiment: str, srv, *, payload: str, batch: int, concurrency: int, opts: LoadOpts,
                   params: dict | None = None, desc: str | None = None) -> dict:
    """One closed-loop point against a served target, with the server's own counters as before/after deltas."""
    before = _safe(srv.snapshot)
    res = closed_loop(_payload_factory(srv, payload, batch), concurrency,
                      desc=desc or f"{experiment} {srv.target} c={concurrency}", **_stability(opts))
    after = _safe(srv.snapshot)
    server = srv.delta(before, after) if before and after else None
    return run.record(
        experiment, kind="load", target=srv.target, backend=srv.backend, engine=srv.engine, protocol=srv.protocol,
        payload=payload, batch=batch, concurrency=concurrency, server=server,
        memory=memory_snapshot(srv.pid, label=f"{srv.target} server"),
        params={**served_params(srv), "load": opts.as_params(), **(params or {})},
        payload_bytes_per_request=_payload_bytes(payload, batch),
        **_load_fields(res),
    )


def served_params(srv) -> dict:
    """JSON-safe parameters of a served target (for Triton: the instances / queue delay now loaded)."""
    out = {k: v for k, v in srv.extra.items() if isinstance(v, (int, float, str, bool, type(None)))}
    if "state" in srv.extra:
        from servelab.bench.triton_targets import public_params

        out.update(public_params(srv))
    return out


def _payload_bytes(payload: str, batch: int) -> int:
    """Bytes of payload the client puts in one request (before protocol framing)."""
    if payload == "tensor":
        return int(sample_tensor(batch).nbytes)
    if payload == "json-lists":
        return len(json.dumps(sample_tensor(batch).ravel().tolist()))
    return int(sum(len(b) for b in sample_jpegs(batch)))


def _stability(opts: LoadOpts) -> dict:
    return {"warmup_s": opts.warmup_s, "window_s": opts.window_s, "max_windows": opts.max_windows,
            "tolerance": opts.tolerance, "requests": opts.requests, "progress": opts.progress,
            "min_window_requests": opts.min_window_requests}


def _safe(fn):
    try:
        return fn()
    except Exception:
        return None


# --- engines (in-process, raw compute) --------------------------------------------------------------

def _make_embedder(engine: str, provider: str = "cpu", threads: int = 0):
    from servelab.config import Settings
    from servelab.model.engines import make_embedder

    return make_embedder(Settings.from_env(), engine=engine, provider=provider, threads=threads or None)


def measure_raw(run: Run, experiment: str, embedder, *, batch: int, opts: LoadOpts, params: dict | None = None,
                cosine_vs_torch: float | None = None) -> dict:
    """Raw in-process throughput of one engine at one batch size (one caller, back-to-back batches)."""
    res = closed_loop(embedder_factory(embedder, sample_tensor(batch)), 1,
                      desc=f"{experiment} {embedder.engine} b={batch}", **_stability(opts))
    return run.record(
        experiment, kind="raw", target="in-process", backend="local", engine=embedder.engine,
        provider=embedder.provider, protocol="inproc", payload="tensor", batch=batch, concurrency=1,
        memory=memory_snapshot(label="this process (engine in-process)"),
        params={"threads": embedder.threads, "load": opts.as_params(), **(params or {})},
        cosine_vs_torch_fp32=cosine_vs_torch,
        **_load_fields(res),
    )


def _torch_reference(engines: tuple, threads: int = 0):
    """torch fp32 (CPU) embeddings of 8 synthetic photos: the reference every engine's cosine is taken against."""
    if "torch" not in engines:
        return None
    emb = _make_embedder("torch", "cpu", threads)
    ref = emb.embed(sample_tensor(8))
    del emb
    gc.collect()
    return ref


def engines(run=None, *, engines: tuple = ENGINES, providers: tuple = ("cpu", "cuda", "tensorrt"),
            batches: tuple = (1, 8, 16, 32), threads: int = 0, quick: bool = False, opts: LoadOpts | None = None,
            window_s: float | None = None) -> list[dict]:
    """Raw throughput of torch fp32 / ORT fp32 / ORT int8 per execution provider and batch size.

    A provider that is not present here (CUDA, TensorRT on a CPU machine) gets a record with available=false and
    the reason, instead of a silent CPU fallback. Each record carries cosine vs torch fp32 (CPU).
    """
    run, opts = _run(run, "engines"), _opts(quick, opts, window_s)
    return engines_fn(run, engines=engines, providers=providers, batches=batches, threads=threads, opts=opts,
                      experiment="engines")


def batch_sweep(run=None, *, target: str = "in-process", engine: str = "onnx", batches: tuple = (1, 2, 4, 8, 16, 32),
                payload: str = "tensor", quick: bool = False, opts: LoadOpts | None = None,
                window_s: float | None = None) -> list[dict]:
    """Throughput and latency vs batch size: in-process (raw engine) or one client sending batch-N requests."""
    run, opts = _run(run, "batch-sweep"), _opts(quick, opts, window_s)
    out = []
    if target == "in-process":
        emb = _make_embedder(engine)
        for b in batches:
            out.append(measure_raw(run, "batch-sweep", emb, batch=b, opts=opts))
        return out
    with served(target, engine=engine, payload=payload, max_batch=max(batches), log_path=run.dir / f"{target}.log") as srv:
        for b in batches:
            out.append(measure_served(run, "batch-sweep", srv, payload=payload, batch=b, concurrency=1, opts=opts))
    return out


def concurrency_sweep(run=None, *, target: str = "fastapi", engine: str = "onnx",
                      concurrencies: tuple = (1, 2, 4, 8, 16, 32, 64, 128), batch: int = 1, payload: str = "tensor",
                      quick: bool = False, opts: LoadOpts | None = None, window_s: float | None = None,
                      **target_kwargs) -> list[dict]:
    """Latency vs throughput as concurrency grows (batch-1 requests by default): the server-side batching curve."""
    run, opts = _run(run, "concurrency-sweep"), _opts(quick, opts, window_s)
    out = []
    with served(target, engine=engine, payload=payload, log_path=run.dir / f"{target}.log", **target_kwargs) as srv:
        for c in concurrencies:
            out.append(measure_served(run, "concurrency-sweep", srv, payload=payload, batch=batch, concurrency=c, opts=opts))
    return out


def rate_sweep(run=None, *, target: str = "fastapi", engine: str = "onnx", rates: tuple = (5, 10, 20, 40),
               payload: str = "tensor", duration_s: float = 10.0, warmup_s: float = 2.0, max_workers: int = 64,
               seed: int = 0, drop_after_s: float | None = None, quick: bool = False) -> list[dict]:
    """Open-loop Poisson arrivals at each rate: latency from scheduled arrival, late starts, drops and backlog."""
    run = _run(run, "rate-sweep")
    if quick:
        duration_s, warmup_s = min(duration_s, 2.0), min(warmup_s, 0.3)
    out = []
    with served(target, engine=engine, payload=payload, log_path=run.dir / f"{target}.log") as srv:
        for rate in rates:
            before = _safe(srv.snapshot)
            res = open_loop(_payload_factory(srv, payload, 1), rate, duration_s=duration_s, warmup_s=warmup_s,
                            max_workers=max_workers, seed=seed, drop_after_s=drop_after_s, desc=f"rate {rate}/s")
            after = _safe(srv.snapshot)
            out.append(run.record(
                "rate-sweep", kind="load", target=srv.target, backend=srv.backend, engine=srv.engine,
                protocol=srv.protocol, payload=payload, batch=1, rate_rps=float(rate),
                server=srv.delta(before, after) if before and after else None,
                memory=memory_snapshot(srv.pid, label=f"{srv.target} server"),
                params={**served_params(srv), "max_workers": max_workers, "seed": seed, "duration_s": duration_s,
                        "warmup_s": warmup_s, "drop_after_s": drop_after_s}, **_load_fields(res)))
    return out


# --- payload & serialisation --------------------------------------------------------------------------

def serialisation_costs(batch: int = 1, repeats: int = 20) -> list[dict]:
    """Client-side cost of each wire format, measured apart from any request: encode time and bytes per request."""
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
        for _ in range(repeats):
            t0 = time.perf_counter()
            body = fn()
            times.append(time.perf_counter() - t0)
        lat = latency_summary(times)
        rows.append({"payload": name, "bytes_per_request": len(body), "bytes_per_image": len(body) / batch,
                     "serialise_p50_ms": lat["latency_p50_ms"], "serialise_p99_ms": lat["latency_p99_ms"],
                     "note": note})
    return rows


def payload(run=None, *, targets: tuple = ("fastapi", "triton-http"), engine: str = "onnx", batch: int = 1,
            concurrency: int = 4, quick: bool = False, opts: LoadOpts | None = None,
            window_s: float | None = None) -> list[dict]:
    """JSON lists vs binary tensor vs JPEG: serialisation cost and bytes (no request), then request throughput."""
    run, opts = _run(run, "payload"), _opts(quick, opts, window_s)
    out = []
    for row in serialisation_costs(batch, repeats=5 if quick else 30):
        out.append(run.record("payload", kind="serialisation", target="client", payload=row["payload"], batch=batch,
                              latency_p50_ms=row["serialise_p50_ms"], latency_p99_ms=row["serialise_p99_ms"],
                              bytes_per_request=row["bytes_per_request"], bytes_per_image=row["bytes_per_image"],
                              note=row["note"], memory=memory_snapshot(label="client process")))
    for target in targets:
        try:
            if target.startswith("triton"):
                out += triton_payload_points(run, target=target, batch=batch, concurrency=concurrency, opts=opts)
                continue
            with served(target, engine=engine, log_path=run.dir / f"{target}.log") as srv:
                for p in ("tensor", "jpeg"):
                    s2 = replace_client_payload(srv, p)
                    rec = measure_served(run, "payload", s2, payload=p, batch=batch, concurrency=concurrency, opts=opts)
                    out.append(rec)
        except Exception as exc:
            out.append(_unavailable(run, "payload", target, exc))
    return out


def replace_client_payload(srv, payload: str):
    """The same served target with clients sending another payload (fastapi: jpeg | tensor)."""
    from servelab.client import InferenceClient

    if srv.target != "fastapi":
        return srv
    return replace(srv, make_client=lambda: InferenceClient(mode="remote", backend="fastapi", url=srv.url, payload=payload))


def _unavailable(run: Run, experiment: str, target: str, exc: Exception, **fields) -> dict:
    return run.record(experiment, kind="unavailable", target=target, available=False,
                      note=f"{type(exc).__name__}: {exc}"[:400], **fields)


# --- cold start ---------------------------------------------------------------------------------------

def cold_start(run=None, *, targets: tuple = ("fastapi", "litserve", "triton-http"), engine: str = "onnx",
               repeats: int = 1, quick: bool = False) -> list[dict]:
    """Process start to ready (the target's readiness probe), then the first request's latency."""
    run = _run(run, "cold-start")
    out = []
    for target in targets:
        for i in range(max(1, repeats)):
            try:
                with served(target, engine=engine, log_path=run.dir / f"{target}.log") as srv:
                    ready_s = srv.startup_s  # process spawn -> readiness probe OK (Triton: staging excluded)
                    client = srv.make_client()
                    t1 = time.perf_counter()
                    client.embed_tensor(sample_tensor(1))
                    first_ms = (time.perf_counter() - t1) * 1000
                    client.close()
                    mem = memory_snapshot(srv.pid, label=f"{target} server")
                out.append(run.record("cold-start", kind="cold-start", target=target, backend=srv.backend,
                                      engine=srv.engine, protocol=srv.protocol, payload="tensor", batch=1,
                                      start_to_ready_s=round(ready_s, 3), first_request_ms=round(first_ms, 2),
                                      latency_p50_ms=round(first_ms, 2), repeats=1, memory=mem,
                                      params={"repeat": i, **served_params(srv),
                                              "probe": {"fastapi": "/readyz", "litserve": "/health"}.get(
                                                  target, "/v2/health/ready (strict readiness)")}))
            except Exception as exc:
                out.append(_unavailable(run, "cold-start", target, exc))
    return out


# --- ONNX Runtime profiling ---------------------------------------------------------------------------

def ort_profile(run=None, *, engine: str = "onnx", provider: str = "cpu", batch: int = 8, iterations: int = 5,
                threads: int = 0, quick: bool = False) -> list[dict]:
    """Share of ORT kernel time by op type, and which execution provider ran each node (the CPU-fallback check)."""
    import os
    import tempfile

    import onnxruntime as ort

    from servelab.config import Settings
    from servelab.model.engines import ort_providers
    from servelab.model.export import ensure_exported

    run = _run(run, "ort-profile")
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
        return [_unavailable(run, "ort-profile", "in-process", exc, engine=engine, provider=provider)]
    x = sample_tensor(batch)
    name = sess.get_inputs()[0].name
    for _ in range(1 if quick else 2):
        sess.run(None, {name: x})
    for _ in range(max(1, 1 if quick else iterations)):
        sess.run(None, {name: x})
    prof = sess.end_profiling()
    events = json.load(open(prof))
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
        "ort-profile", kind="profile", target="in-process", backend="local", engine=engine, provider=provider,
        protocol="inproc", payload="tensor", batch=batch, repeats=iterations,
        op_time_share=shares, op_time_ms={k: round(v, 3) for k, v in by_op.items()},
        nodes_by_provider=by_provider, cpu_fallback_nodes=cpu_fallback[:50], n_cpu_fallback_nodes=len(cpu_fallback),
        active_providers=sess.get_providers(), memory=memory_snapshot(label="this process"),
        note=f"profile events from {len(events)} entries; share of summed kernel time",
    )]


# --- peer baseline ------------------------------------------------------------------------------------

def peer_baseline(run=None, *, targets: tuple = ("fastapi", "litserve", "triton-http"), engine: str = "onnx",
                  concurrencies: tuple = (1, 16), payload: str = "jpeg", max_batch: int = 16, quick: bool = False,
                  opts: LoadOpts | None = None, window_s: float | None = None) -> list[dict]:
    """servelab's service vs LitServe vs Triton, same engine, same requests, one run.

    JPEG payload by default: each server decodes and preprocesses (servelab: multipart; LitServe: base64 JSON;
    Triton: the JPEG ensemble). Target (issue 4): servelab ≥ 1.0× LitServe throughput at c=16, p99 no worse.
    """
    run, opts = _run(run, "peer-baseline"), _opts(quick, opts, window_s)
    out = []
    for target in targets:
        try:
            kw = {"max_batch": max_batch}
            if target.startswith("triton"):
                kw = {"payload": payload}
            else:
                kw["payload"] = payload
            with served(target, engine=engine, log_path=run.dir / f"{target}.log", **kw) as srv:
                for c in concurrencies:
                    out.append(measure_served(run, "peer-baseline", srv, payload=payload, batch=1, concurrency=c, opts=opts))
        except Exception as exc:
            out.append(_unavailable(run, "peer-baseline", target, exc))
    out += peer_targets(run, out, concurrency=max(concurrencies))
    return out


def peer_targets(run: Run, records: list[dict], concurrency: int = 16) -> list[dict]:
    def at(target):
        for r in records:
            if r["target"] == target and r.get("concurrency") == concurrency and r["kind"] == "load":
                return r
        return None

    s, l = at("fastapi"), at("litserve")
    if not s or not l or not l["throughput_img_s"]:
        return []
    ratio = s["throughput_img_s"] / l["throughput_img_s"]
    return [
        target_record(run, "peer-baseline", f"servelab / LitServe throughput at c={concurrency}", ratio, ">=", 1.0,
                      inputs=[s, l]),
        target_record(run, "peer-baseline", f"servelab p99 - LitServe p99 at c={concurrency} (ms)",
                      s["latency_p99_ms"] - l["latency_p99_ms"], "<=", 0.0, inputs=[s, l]),
    ]


def target_record(run: Run, experiment: str, name: str, value: float | None, op: str | None, threshold: float | None,
                  note: str | None = None, inputs: list | None = None) -> dict:
    """A derived record: a target, the measured value, met / not met (op None: informational, no verdict).

    `inputs` are the records the value came from: the record says whether they were all stable and whether
    any came from a quick (smoke) run, so a verdict never hides shaky inputs.
    """
    met = None if value is None or op is None else (value >= threshold if op == ">=" else value <= threshold)
    inputs = [r for r in (inputs or []) if r]
    return run.record(experiment, kind="derived", target=name, value=None if value is None else round(float(value), 4),
                      op=op, threshold=threshold, met=met, note=note,
                      inputs_stable=all(r.get("stable") for r in inputs) if inputs else None,
                      quick=any((r.get("params") or {}).get("load", {}).get("label") == "quick" for r in inputs))


# --- issue 2: `servelab bench service` -----------------------------------------------------------------

def service(run=None, *, engines: tuple = ENGINES, served_engines: tuple | None = None, raw_batches: tuple = (1, 16),
            concurrencies: tuple = (1, 16), payload: str = "tensor", threads: int = 0, quick: bool = False,
            opts: LoadOpts | None = None, window_s: float | None = None) -> list[dict]:
    """Issue 2's benchmark in one run: raw engines at batch 1 and 16, served batch-1 requests at c=1 and 16, targets.

    Targets: served / raw(batch 16) ≥ 0.95 at c=16; p50 at c=1 minus raw batch-1 p50 ≤ 3 ms; int8 ≥ 2.5× torch fp32
    (batch 16) at cosine ≥ 0.999 vs torch fp32.
    """
    run, opts = _run(run, "service"), _opts(quick, opts, window_s)
    served_engines = served_engines or (("onnx",) if quick else engines)
    out = engines_fn(run, engines=engines, providers=("cpu",), batches=raw_batches, threads=threads, opts=opts,
                     experiment="service")
    for engine in served_engines:
        with served("fastapi", engine=engine, payload=payload, threads=threads, max_batch=max(raw_batches),
                    log_path=run.dir / "fastapi.log") as srv:
            for c in concurrencies:
                out.append(measure_served(run, "service", srv, payload=payload, batch=1, concurrency=c, opts=opts))
    out += service_targets(run, out, hi=max(concurrencies), lo=min(concurrencies), big=max(raw_batches),
                           small=min(raw_batches))
    return out


def engines_fn(run: Run, *, engines, providers, batches, threads, opts, experiment) -> list[dict]:
    """engines() writing under another experiment name (service / triton reuse it).

    One engine is loaded at a time, compared with the torch fp32 reference (cosine_vs_torch_fp32, min over 8
    photos), measured at each batch size, then released. The memory field is this process's RSS (engines loaded
    earlier may still hold memory the allocator kept: a per-engine figure needs a process of its own).
    """
    from servelab.model.export import cosine_rows

    out = []
    ref = _torch_reference(tuple(engines), threads)
    for provider in providers:
        for engine in engines:
            try:
                emb = _make_embedder(engine, provider, threads)
            except Exception as exc:
                out.append(run.record(experiment, kind="unavailable", target="in-process", backend="local",
                                      engine=engine, provider=provider, available=False,
                                      note=f"{type(exc).__name__}: {exc}"[:400]))
                continue
            cos = float(cosine_rows(ref, emb.embed(sample_tensor(8))).min()) if ref is not None else None
            for b in batches:
                out.append(measure_raw(run, experiment, emb, batch=b, opts=opts, cosine_vs_torch=cos))
            del emb
            gc.collect()
    return out


def _find(records, **kv):
    for r in records:
        if all(r.get(k) == v for k, v in kv.items()):
            return r
    return None


def service_targets(run: Run, records: list[dict], *, hi=16, lo=1, big=16, small=1) -> list[dict]:
    out = []
    for engine in ENGINES:
        raw_big = _find(records, kind="raw", engine=engine, batch=big)
        raw_small = _find(records, kind="raw", engine=engine, batch=small)
        s_hi = _find(records, kind="load", target="fastapi", engine=engine, concurrency=hi)
        s_lo = _find(records, kind="load", target="fastapi", engine=engine, concurrency=lo)
        if raw_big and s_hi and raw_big["throughput_img_s"]:
            out.append(target_record(run, "service", f"{engine}: served c={hi} / raw batch {big} throughput",
                                     s_hi["throughput_img_s"] / raw_big["throughput_img_s"], ">=", 0.95,
                                     inputs=[s_hi, raw_big]))
        if raw_small and s_lo and raw_small["latency_p50_ms"] is not None and s_lo["latency_p50_ms"] is not None:
            out.append(target_record(run, "service", f"{engine}: served c={lo} p50 - raw batch {small} p50 (ms)",
                                     s_lo["latency_p50_ms"] - raw_small["latency_p50_ms"], "<=", 3.0,
                                     inputs=[s_lo, raw_small]))
    t, q = _find(records, kind="raw", engine="torch", batch=big), _find(records, kind="raw", engine="onnx-int8", batch=big)
    if t and q and t["throughput_img_s"]:
        cos = q.get("cosine_vs_torch_fp32")
        out.append(target_record(run, "service", f"onnx-int8 / torch fp32 throughput (batch {big})",
                                 q["throughput_img_s"] / t["throughput_img_s"], ">=", 2.5, inputs=[q, t]))
        out.append(target_record(run, "service", "onnx-int8 min cosine vs torch fp32", cos, ">=", 0.999,
                                 note="min over 8 synthetic photos"))
    return out


def targets_table(records: list[dict]) -> list[dict]:
    """The derived target records as rows: target, measured, required, met / not met (with caveats)."""
    rows = []
    for r in records:
        if r.get("kind") != "derived":
            continue
        met = r.get("met")
        status = "met" if met else ("not met" if met is False else ("info" if r.get("op") is None else "not measured"))
        caveats = []
        if r.get("inputs_stable") is False:
            caveats.append("inputs not stable")
        if r.get("quick"):
            caveats.append("quick run: not a result")
        rows.append({"target": r["target"], "measured": r.get("value"),
                     "required": f"{r.get('op')} {r.get('threshold')}" if r.get("op") else "",
                     "status": status + (f" ({'; '.join(caveats)})" if caveats else "")})
    return rows


# --- cost ------------------------------------------------------------------------------------------------

def cost_table(records: list[dict], price_per_hour: float, currency: str = "USD") -> list[dict]:
    """images/s of each load/raw record -> cost per 1,000 images at `price_per_hour` for the machine."""
    from servelab.bench.stats import cost_per_1000

    rows = []
    for r in records:
        if r.get("kind") in ("load", "raw") and r.get("throughput_img_s"):
            c = cost_per_1000(r["throughput_img_s"], price_per_hour)
            rows.append({"experiment": r["experiment"], "target": r["target"], "engine": r.get("engine"),
                         "payload": r.get("payload"), "batch": r.get("batch"), "concurrency": r.get("concurrency"),
                         "throughput_img_s": r["throughput_img_s"], f"price_{currency}_per_hour": price_per_hour,
                         f"cost_{currency}_per_1000_img": round(c, 6) if c is not None else None})
    return rows


# --- Triton experiments (servelab.triton's server, stats and reload; see triton_targets) ----------------

def _triton_variants(srv, protocols, payloads):
    from servelab.bench.triton_targets import variant

    for proto in protocols:
        for p in payloads:
            yield p, variant(srv, proto, p)


def http_vs_grpc(run=None, *, concurrencies: tuple = (1, 16), payload: str = "tensor", quick: bool = False,
                 opts: LoadOpts | None = None, window_s: float | None = None) -> list[dict]:
    """The same Triton model over HTTP and gRPC (binary tensors), batch-1 requests."""
    run, opts = _run(run, "http-grpc"), _opts(quick, opts, window_s)
    out = []
    with served("triton-http", payload=payload, log_path=run.dir / "triton.log") as srv:
        for p, v in _triton_variants(srv, ("http", "grpc"), (payload,)):
            for c in concurrencies:
                out.append(measure_served(run, "http-grpc", v, payload=p, batch=1, concurrency=c, opts=opts))
    return out


def queue_delay_grid(run=None, *, delays_us: tuple = (0, 1000, 4000, 16000), concurrencies: tuple = (1, 4, 16),
                     protocol: str = "grpc", payload: str = "tensor", quick: bool = False, opts: LoadOpts | None = None,
                     window_s: float | None = None) -> list[dict]:
    """Dynamic-batching max queue delay × concurrency; the model is reloaded (repository API) between delays."""
    run, opts = _run(run, "queue-delay"), _opts(quick, opts, window_s)
    out = []
    with served(f"triton-{protocol}", payload=payload, log_path=run.dir / "triton.log") as srv:
        for d in delays_us:
            srv.extra["reconfigure"](max_queue_delay_us=int(d))
            for c in concurrencies:
                out.append(measure_served(run, "queue-delay", srv, payload=payload, batch=1, concurrency=c, opts=opts))
    return out


def instance_scaling(run=None, *, counts: tuple = (1, 2, 3, 4), concurrency: int = 16, protocol: str = "grpc",
                     payload: str = "tensor", quick: bool = False, opts: LoadOpts | None = None,
                     window_s: float | None = None) -> list[dict]:
    """Triton instance_group count 1…N (on CPU the analogue of the multi-GPU study; on a GPU node, per GPU).

    Each count is staged fresh so onnxruntime threads per instance = cores // count (no oversubscription);
    records carry instances, threads per instance, and scaling efficiency vs one instance.
    """
    run, opts = _run(run, "instances"), _opts(quick, opts, window_s)
    out = []
    for n in counts:
        try:
            with served(f"triton-{protocol}", payload=payload, instances=int(n), log_path=run.dir / "triton.log") as srv:
                out.append(measure_served(run, "instances", srv, payload=payload, batch=1, concurrency=concurrency,
                                          opts=opts))
        except Exception as exc:
            out.append(_unavailable(run, "instances", f"triton-{protocol}", exc, params={"instances": int(n)}))
    base = next((r for r in out if r["kind"] == "load" and r["params"].get("instances") == 1), None)
    for r in list(out):
        if base and r["kind"] == "load" and base["throughput_img_s"]:
            eff = r["throughput_img_s"] / (r["params"]["instances"] * base["throughput_img_s"])
            out.append(target_record(run, "instances", f"scaling efficiency x{r['params']['instances']}", eff, None, None,
                                     note="throughput / (instances × throughput of 1 instance)", inputs=[r, base]))
    return out


def triton_payload_points(run: Run, *, target: str = "triton-http", batch: int = 1, concurrency: int = 4,
                          opts: LoadOpts) -> list[dict]:
    """Triton requests with JSON lists (HTTP only), binary tensor and JPEG (ensemble) payloads."""
    from servelab.bench.triton_targets import TritonJsonClient, variant

    protocol = target.split("-")[1]
    out = []
    with served(target, payload="tensor", log_path=run.dir / "triton.log") as srv:
        for p in ("tensor", "jpeg"):
            out.append(measure_served(run, "payload", variant(srv, protocol, p), payload=p, batch=batch,
                                      concurrency=concurrency, opts=opts))
        if protocol == "http":
            url, model = srv.extra["triton"].http_url, srv.extra["model"]
            js = replace(srv, make_client=lambda: TritonJsonClient(url, model))
            out.append(measure_served(run, "payload", js, payload="json-lists", batch=batch, concurrency=concurrency,
                                      opts=opts))
    return out


def triton(run=None, *, concurrency: int = 16, protocols: tuple = ("http", "grpc"), payloads: tuple = ("tensor", "jpeg"),
           offline_batch: int = 16, threads: int = 0, quick: bool = False, opts: LoadOpts | None = None,
           window_s: float | None = None) -> list[dict]:
    """Issue 3's benchmark in one run: offline ORT batch-16 in-process vs Triton batch-1 at c=16, HTTP vs gRPC,
    tensor vs JPEG payload (bytes per request and client-observed throughput).

    Targets: Triton (best protocol, tensor) at c=16 ≥ 0.95 × offline batch-16; JPEG path ≥ tensor path per protocol.
    """
    run, opts = _run(run, "triton"), _opts(quick, opts, window_s)
    out = engines_fn(run, engines=("onnx",), providers=("cpu",), batches=(1, offline_batch), threads=threads, opts=opts,
                     experiment="triton")
    try:
        with served("triton-http", payload="tensor", log_path=run.dir / "triton.log") as srv:
            for p, v in _triton_variants(srv, protocols, payloads):
                for c in sorted({1, concurrency}):
                    out.append(measure_served(run, "triton", v, payload=p, batch=1, concurrency=c, opts=opts))
    except Exception as exc:
        out.append(_unavailable(run, "triton", "triton", exc))
    out += triton_targets(run, out, concurrency=concurrency, offline_batch=offline_batch)
    return out


def triton_targets(run: Run, records: list[dict], *, concurrency: int = 16, offline_batch: int = 16) -> list[dict]:
    out = []
    raw = _find(records, kind="raw", engine="onnx", batch=offline_batch)
    for proto in ("http", "grpc"):
        t = _find(records, kind="load", target=f"triton-{proto}", payload="tensor", concurrency=concurrency)
        j = _find(records, kind="load", target=f"triton-{proto}", payload="jpeg", concurrency=concurrency)
        if raw and t and raw["throughput_img_s"]:
            out.append(target_record(run, "triton", f"triton-{proto} tensor c={concurrency} / offline batch {offline_batch}",
                                     t["throughput_img_s"] / raw["throughput_img_s"], ">=", 0.95, inputs=[t, raw]))
        if t and j and t["throughput_img_s"]:
            out.append(target_record(run, "triton", f"triton-{proto} jpeg / tensor throughput c={concurrency}",
                                     j["throughput_img_s"] / t["throughput_img_s"], ">=", 1.0, inputs=[j, t],
                                     note=f"bytes/request: jpeg {j.get('payload_bytes_per_request')}, "
                                          f"tensor {t.get('payload_bytes_per_request')}"))
    return out
