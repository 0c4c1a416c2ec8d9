"""The engines without a server: raw in-process throughput per engine and provider, what each wire format costs
the client to build, and where ONNX Runtime spends its time.

    raw_engines(run, engines=MODEL_ENGINES, batches=(1, 8)), serialisation(run, batches=(1, 16)), ort_profile(run)
"""

from __future__ import annotations

import gc
import io
import json
import time

import numpy as np

from servelab.bench.experiments.point import measure, unavailable
from servelab.bench.load.inputs import sample_jpegs, sample_tensor
from servelab.bench.load.options import LoadOpts
from servelab.bench.load.stats import latency_summary
from servelab.bench.results.records import Run, memory_snapshot
from servelab.bench.servers.in_process import InProcess, make_embedder
from servelab.model.contract import INPUT_NAME, TRITON_DTYPE
from servelab.vocabulary import MODEL_ENGINES, Provider


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


def raw_engines(run: Run, *, engines: tuple = MODEL_ENGINES, providers: tuple = (Provider.CPU,), batches: tuple = (1, 8, 16, 32),
            threads: int = 0, opts: LoadOpts | None = None, experiment: str = "engines", settings=None) -> list[dict]:
    """Raw in-process throughput of torch fp32 / ORT fp32 / ORT int8 per execution provider and batch size.

    One engine is loaded at a time, compared with torch fp32 (cosine_vs_torch_fp32, min over 8 photos), measured
    at each batch size, then released. A provider that is not present here gets a record with available=false
    and the reason, instead of a silent CPU fallback. `settings` (servelab.config.Settings) give what the
    arguments leave open, such as the torch engine's precision; default: from the environment.
    """
    from servelab.model.export import cosine_rows

    out = []
    ref = _torch_reference(tuple(engines), threads)
    for provider in providers:
        for engine in engines:
            try:
                emb = make_embedder(engine, provider, threads, settings=settings)
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
        return json.dumps({"inputs": [{"name": INPUT_NAME, "shape": list(x.shape), "datatype": TRITON_DTYPE,
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
