"""Benchmark (a record, not a test): group N random unit embeddings with planted near-duplicate pairs.

Each repeat runs in a fresh process so peak RSS (ru_maxrss) belongs to that run alone; the record gives
the pair-search + components time, peak RSS of the whole process (data included) and the share of planted
pairs found. Goals: 100k x 512 in < 30 s and < 1 GB on 2 cores.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import resource
import time
from pathlib import Path

import numpy as np

from servelab.fileio import atomic_write
from servelab.fingerprint import environment_fingerprint


def _one_run(n, dim, threshold, planted, method, seed, queue):
    from servelab.dedup.group import components, similar_pairs

    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, dim), dtype=np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    idx = rng.choice(n, 2 * planted, replace=False)
    a, b = idx[:planted], idx[planted:]
    noise = rng.standard_normal((planted, dim), dtype=np.float32)
    noise -= (noise * x[a]).sum(1, keepdims=True) * x[a]
    noise /= np.linalg.norm(noise, axis=1, keepdims=True)
    c = rng.uniform(threshold + 1e-3, 1.0, (planted, 1)).astype(np.float32)
    x[b] = c * x[a] + np.sqrt(1 - c ** 2) * noise
    x[b] /= np.linalg.norm(x[b], axis=1, keepdims=True)
    base_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    t0 = time.perf_counter()
    i, j, s = similar_pairs(x, threshold, method=method)
    groups = components(n, i, j)
    seconds = time.perf_counter() - t0
    found = set(zip(i.tolist(), j.tolist(), strict=False))
    truth = {(min(p, q), max(p, q)) for p, q in zip(a.tolist(), b.tolist(), strict=False)}
    queue.put({"seconds": seconds, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
               "rss_before_mb": base_mb, "pairs": len(found), "groups": len(groups),
               "planted_recall": len(found & truth) / max(1, len(truth))})


def bench_group(n=100_000, dim=512, threshold=0.92, planted=1000, method="auto", repeats=1, out=Path("results"),
                seed=0) -> dict:
    from servelab.dedup.group import AUTO_EXACT_MAX

    ctx = mp.get_context("spawn")
    runs = []
    for r in range(repeats):
        q = ctx.Queue()
        p = ctx.Process(target=_one_run, args=(n, dim, threshold, planted, method, seed + r, q))
        p.start()
        res = q.get()
        p.join()
        runs.append(res)
    used = method if method != "auto" else ("exact" if n <= AUTO_EXACT_MAX else "lsh")
    rec = {
        "experiment": "dedup_group", "method": used, "n": n, "dim": dim, "threshold": threshold, "planted": planted,
        "repeats": repeats, "runs": runs,
        "seconds": float(np.median([x["seconds"] for x in runs])),
        "peak_rss_mb": float(max(x["peak_rss_mb"] for x in runs)),
        "planted_recall": float(min(x["planted_recall"] for x in runs)),
        "targets": {"seconds": 30, "peak_rss_mb": 1024,
                    "met": None},
        "note": "seconds = pair search + connected components (data generation excluded); peak_rss_mb = whole "
                "process high-water mark including the embeddings; random embeddings, planted pairs with cosine "
                "uniform in [threshold, 1]",
        "environment": environment_fingerprint(weights="none (random embeddings)"),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    rec["targets"]["met"] = rec["seconds"] < 30 and rec["peak_rss_mb"] < 1024
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"dedup_group_{used}_{n}_{time.strftime('%Y%m%d-%H%M%S')}.json"
    rec["path"] = str(path)
    atomic_write(path, json.dumps(rec, indent=2))
    return rec
