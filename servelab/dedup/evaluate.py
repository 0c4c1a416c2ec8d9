"""Detection quality on a generated, labelled near-duplicate set.

Base photos come from `servelab.data.synthetic_photo` (generated) plus, when matplotlib is installed, the
sample photo it ships (`grace_hopper.jpg`) — nothing is downloaded. Every base gets transformed copies
(exact copy, JPEG re-compression, resize, crop, brightness/contrast, small rotation, PNG re-encode); extra
distinct photos serve as negatives. The set goes through the real pipeline (scan -> embed via the client),
then every pair of files is labelled duplicate iff both come from the same base, and each detector is scored
on pairs: MD5 equality, pHash / dHash Hamming distance <= d, embedding cosine >= t. The finder's own grouping
is scored the same way (a pair is called a duplicate when both files land in one group): at the default rule
for the weights in use, and with cosine >= 0.92 alone for comparison.
Outputs: labels.csv (ground truth), metrics.csv, metrics.md, per_transform.csv, pr.png, summary.json (all written via temp + rename).
"""

from __future__ import annotations

import io
import json
import shutil
import time
from pathlib import Path

import numpy as np
from PIL import Image, ImageEnhance

from servelab.data import encode, synthetic_photo
from servelab.dedup.catalog import Catalog
from servelab.dedup.embed import embed as embed_catalog
from servelab.dedup.group import Rule, default_rule, group
from servelab.dedup.scan import scan as scan_folder
from servelab.errors import CannotRun, InvalidValue
from servelab.fileio import atomic_path, atomic_write

PHASH_DISTANCES = (0, 2, 4, 6, 8, 10, 12, 14, 16)
COSINES = (0.80, 0.85, 0.90, 0.92, 0.95, 0.97, 0.99)
RANDOM_INIT_NOTE = ("The embedding model has random-init weights (no pretrained checkpoint could be loaded here): "
                    "its numbers show the pipeline works end to end and are NOT a claim about pretrained CLIP. "
                    "Set SERVELAB_PRETRAINED or SERVELAB_CHECKPOINT and rerun for real figures.")


# --- the labelled set --------------------------------------------------------------------------------------
def _jpeg(img, q=90):
    return encode(img, "JPEG", quality=q)


def _crop(img):
    w, h = img.size
    return img.crop((int(w * 0.06), int(h * 0.10), int(w * 0.90), int(h * 0.94)))


def _rotate(img):
    w, h = img.size
    r = img.rotate(3, resample=Image.BICUBIC, expand=False)
    return r.crop((int(w * 0.05), int(h * 0.05), int(w * 0.95), int(h * 0.95)))


TRANSFORMS = {
    "exact_copy": None,  # the original's bytes
    "jpeg_q35": lambda im: _jpeg(im, 35),
    "resize_50": lambda im: _jpeg(im.resize((im.width // 2, im.height // 2), Image.LANCZOS)),
    "crop_80": lambda im: _jpeg(_crop(im)),
    "brightness_contrast": lambda im: _jpeg(ImageEnhance.Contrast(ImageEnhance.Brightness(im).enhance(1.25)).enhance(0.8)),
    "rotate_3": lambda im: _jpeg(_rotate(im)),
    "png": lambda im: encode(im, "PNG"),
}


def _bases(n: int, size: int, seed: int, offset: int = 0) -> list[tuple[str, Image.Image]]:
    out = []
    for k in range(n):
        out.append((f"synthetic_{seed + offset + k}", synthetic_photo(seed * 100_003 + offset + k, (size, int(size * 0.75)))))
    return out


def _shipped_photo(size: int):
    try:
        import matplotlib.cbook as cbook

        with cbook.get_sample_data("grace_hopper.jpg") as fh:
            img = Image.open(io.BytesIO(fh.read())).convert("RGB")
    except Exception:
        return None
    img.thumbnail((size, size), Image.LANCZOS)
    return ("matplotlib_grace_hopper", img)


def build_set(folder: Path, n_base: int = 24, n_negatives: int = 24, size: int = 320, seed: int = 0,
              use_shipped: bool = True) -> list[dict]:
    """Write the labelled set under `folder`; returns one label row per file."""
    folder.mkdir(parents=True, exist_ok=True)
    bases = _bases(n_base, size, seed)
    shipped = _shipped_photo(size) if use_shipped else None
    if shipped:
        bases.append(shipped)
    labels = []
    for name, img in bases:
        orig = _jpeg(img, 92)
        (folder / name).mkdir(exist_ok=True)
        (folder / name / "original.jpg").write_bytes(orig)
        labels.append({"path": f"{name}/original.jpg", "base": name, "transform": "original"})
        for t, fn in TRANSFORMS.items():
            data = orig if fn is None else fn(img)
            ext = "png" if t == "png" else "jpg"
            (folder / name / f"{t}.{ext}").write_bytes(data)
            labels.append({"path": f"{name}/{t}.{ext}", "base": name, "transform": t})
    neg = folder / "negatives"
    neg.mkdir(exist_ok=True)
    for name, img in _bases(n_negatives, size, seed, offset=50_000):
        (neg / f"{name}.jpg").write_bytes(_jpeg(img, 92))
        labels.append({"path": f"negatives/{name}.jpg", "base": f"neg:{name}", "transform": "negative"})
    return labels


COSINE_ONLY = 0.92  # the grouping scored for comparison: cosine alone, no pHash agreement


def _group_labels(groups, ids: np.ndarray) -> np.ndarray:
    """Group index per embedded file (in `ids` order), -1 for files in no group."""
    label = np.full(len(ids), -1, dtype=np.int64)
    pos = {int(i): k for k, i in enumerate(ids.tolist())}
    for n, g in enumerate(groups):
        for i in g.ids:
            if i in pos:
                label[pos[i]] = n
    return label


# --- scoring -----------------------------------------------------------------------------------------------
def _popcount_matrix(hexes: list[str]) -> np.ndarray:
    bits = np.array([[int(c, 16) for c in h] for h in hexes], dtype=np.uint8)
    b = np.unpackbits(bits[:, :, None], axis=2)[:, :, 4:].reshape(len(hexes), -1)  # 4 bits per hex digit
    return (b[:, None, :] != b[None, :, :]).sum(2)


def _prf(pred: np.ndarray, truth: np.ndarray) -> dict:
    tp = int((pred & truth).sum())
    fp = int((pred & ~truth).sum())
    fn = int((~pred & truth).sum())
    p = tp / (tp + fp) if tp + fp else 1.0
    r = tp / (tp + fn) if tp + fn else 1.0
    f1 = 2 * p * r / (p + r) if p + r else 0.0
    return {"tp": tp, "fp": fp, "fn": fn, "precision": round(p, 4), "recall": round(r, 4), "f1": round(f1, 4)}


def grouping_quality(groups, ids, scene) -> dict:
    """Pairwise precision and recall of a grouping against ground truth: a pair of files is called a duplicate
    when both land in one group, and truly is one when they share a scene (`scene[k]` labels `ids[k]`)."""
    ids, scene = np.asarray(ids), np.asarray(scene)
    if len(ids) != len(scene):
        raise InvalidValue(f"one scene label per file: {len(ids)} ids, {len(scene)} labels")
    label = _group_labels(groups, ids)
    upper = np.triu_indices(len(ids), 1)
    called = ((label[:, None] == label[None, :]) & (label[:, None] >= 0))[upper]
    return _prf(called, (scene[:, None] == scene[None, :])[upper])


def evaluate(out: str | Path, client, n_base: int = 24, n_negatives: int = 24, size: int = 320, seed: int = 0,
             batch_size: int = 16, progress: bool = False) -> dict:
    """Build the set under out/images, run scan + embed, score every detector; returns paths and rows."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    images = out / "images"
    if images.exists():
        shutil.rmtree(images)
    t0 = time.perf_counter()
    labels = build_set(images, n_base=n_base, n_negatives=n_negatives, size=size, seed=seed)
    catalog = out / "catalog.sqlite"
    for p in (catalog, Path(str(catalog) + "-wal"), Path(str(catalog) + "-shm")):
        p.unlink(missing_ok=True)
    with Catalog(catalog, root=images) as cat:
        scan_folder(images, cat)
        rep = embed_catalog(cat, client, batch_size=batch_size, progress=progress)
        rows = {r["path"]: r for r in cat.files("ok")}
        ids, emb = cat.embeddings(rep.weights)
        id_to_row = {r["id"]: r for r in rows.values()}
        rule = default_rule(rep.weights)
        grouped = {"default": group(cat, rule=rule),
                   "cosine_only": group(cat, rule=Rule(COSINE_ONLY, None, "for comparison: cosine alone"))}
    missing = [lab["path"] for lab in labels if lab["path"] not in rows]
    if missing:
        raise CannotRun(f"{len(missing)} generated files were not catalogued, e.g. {missing[0]}")
    lab_by_path = {lab["path"]: lab for lab in labels}
    paths = [id_to_row[i]["path"] for i in ids.tolist()]
    base = np.array([lab_by_path[p]["base"] for p in paths])
    transform = np.array([lab_by_path[p]["transform"] for p in paths])
    md5 = np.array([id_to_row[i]["md5"] for i in ids.tolist()])
    n = len(paths)
    iu = np.triu_indices(n, 1)
    truth = (base[:, None] == base[None, :])[iu]
    cos = (emb @ emb.T)[iu]
    ph = _popcount_matrix([id_to_row[i]["phash"] for i in ids.tolist()])[iu]
    dh = _popcount_matrix([id_to_row[i]["dhash"] for i in ids.tolist()])[iu]
    md5eq = (md5[:, None] == md5[None, :])[iu]
    # pairs (original, variant) per transform, for the per-transform recall table
    ti, tj = iu
    orig_pair = {}
    for t in list(TRANSFORMS):
        m = truth & (((transform[ti] == "original") & (transform[tj] == t)) | ((transform[tj] == "original") & (transform[ti] == t)))
        orig_pair[t] = m
    detectors = [("md5", "equal", md5eq)]
    detectors += [("phash", f"distance <= {d}", ph <= d) for d in PHASH_DISTANCES]
    detectors += [("dhash", f"distance <= {d}", dh <= d) for d in PHASH_DISTANCES]
    detectors += [("embedding", f"cosine >= {t:.2f}", cos >= t) for t in COSINES]
    group_of = {name: _group_labels(gs, ids) for name, gs in grouped.items()}
    same_group = {name: ((g[:, None] == g[None, :]) & (g[:, None] >= 0))[iu] for name, g in group_of.items()}
    detectors += [("grouping", f"default: {rule.describe()}", same_group["default"]),
                  ("grouping", f"cosine >= {COSINE_ONLY:.2f} alone", same_group["cosine_only"])]
    metric_rows, transform_rows = [], []
    for method, setting, pred in detectors:
        metric_rows.append({"method": method, "setting": setting, **_prf(pred, truth)})
        transform_rows.append({"method": method, "setting": setting,
                               **{t: round(float(pred[m].mean()), 3) if m.any() else None for t, m in orig_pair.items()}})
    weights = rep.weights
    from servelab.model.weights import is_random_init

    random_init = is_random_init(weights)
    info = client.info() if hasattr(client, "info") else {}
    summary = {
        "weights": weights, "random_init": random_init, "note": RANDOM_INIT_NOTE if random_init else "",
        "client": {k: info.get(k) for k in ("mode_used", "backend", "engine", "provider", "payload") if k in info},
        "files": n, "pairs": int(len(truth)), "duplicate_pairs": int(truth.sum()),
        "bases": n_base + (1 if any(lab["base"] == "matplotlib_grace_hopper" for lab in labels) else 0),
        "negatives": n_negatives, "size": size, "seed": seed, "transforms": list(TRANSFORMS),
        "seconds": round(time.perf_counter() - t0, 2),
        "defaults": {"rule": rule.as_dict(), "groups": len(grouped["default"]),
                     **_prf(same_group["default"], truth)},
        "cosine_stats": {"duplicates_mean": round(float(cos[truth].mean()), 4) if truth.any() else None,
                         "non_duplicates_mean": round(float(cos[~truth].mean()), 4) if (~truth).any() else None,
                         "non_duplicates_max": round(float(cos[~truth].max()), 4) if (~truth).any() else None},
    }
    files = {
        "labels": _write(out / "labels.csv", _csv(labels)),
        "csv": _write(out / "metrics.csv", _csv(metric_rows)),
        "per_transform": _write(out / "per_transform.csv", _csv(transform_rows)),
        "markdown": _write(out / "metrics.md", _markdown(summary, metric_rows, transform_rows)),
        "summary": _write(out / "summary.json", json.dumps({**summary, "metrics": metric_rows}, indent=2)),
        "plot": _plot(out / "pr.png", truth, md5eq, ph, dh, cos, summary),
    }
    return {"files": [str(p) for p in files.values()], **{k: str(v) for k, v in files.items()},
            "summary": summary, "metrics": metric_rows, "per_transform": transform_rows}


def _csv(rows: list[dict]) -> str:
    import pandas as pd

    return pd.DataFrame(rows).to_csv(index=False)


def _write(path: Path, text: str) -> Path:
    return atomic_write(path, text)


def _markdown(summary: dict, rows: list[dict], trows: list[dict]) -> str:
    lines = [
        "# Near-duplicate detection quality (pairwise)", "",
        f"- weights: **{summary['weights']}**" + (" (random-init: not pretrained CLIP)" if summary["random_init"] else ""),
        f"- client: {json.dumps(summary['client'])}",
        f"- set: {summary['files']} files = {summary['bases']} base photos x (original + {len(summary['transforms'])} "
        f"transforms: {', '.join(summary['transforms'])}) + {summary['negatives']} distinct negatives; "
        f"{summary['pairs']} pairs, {summary['duplicate_pairs']} duplicate pairs; photo long side {summary['size']} px, seed {summary['seed']}",
        f"- embedding cosine: duplicates mean {summary['cosine_stats']['duplicates_mean']}, "
        f"non-duplicates mean {summary['cosine_stats']['non_duplicates_mean']} (max {summary['cosine_stats']['non_duplicates_max']})",
    ]
    d = summary["defaults"]
    lines += [f"- **at the defaults** ({d['rule']['text']}; {d['rule']['source']}): {d['groups']} groups, pairwise "
              f"precision **{d['precision']:.3f}**, recall **{d['recall']:.3f}** (row `grouping` below)"]
    if summary["note"]:
        lines += ["", f"> **Note.** {summary['note']}"]
    lines += ["", "| method | setting | precision | recall | F1 | TP | FP | FN |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['method']} | {r['setting']} | {r['precision']:.3f} | {r['recall']:.3f} | {r['f1']:.3f} | "
                     f"{r['tp']} | {r['fp']} | {r['fn']} |")
    ts = [k for k in trows[0] if k not in ("method", "setting")]
    lines += ["", "Recall of (original, transformed copy) pairs per transform:", "",
              "| method | setting | " + " | ".join(ts) + " |", "|---|---|" + "---|" * len(ts)]
    for r in trows:
        lines.append(f"| {r['method']} | {r['setting']} | " + " | ".join("" if r[t] is None else f"{r[t]:.2f}" for t in ts) + " |")
    return "\n".join(lines) + "\n"


def _plot(path: Path, truth, md5eq, ph, dh, cos, summary) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def curve(score_pred):
        pts = []
        for pred in score_pred:
            m = _prf(pred, truth)
            pts.append((m["recall"], m["precision"]))
        return zip(*pts, strict=False)

    fig, ax = plt.subplots(figsize=(6.4, 4.8), dpi=110)
    r, p = curve([ph <= d for d in range(0, 33)])
    ax.plot(r, p, "o-", ms=3, label="pHash (distance 0…32)")
    r, p = curve([dh <= d for d in range(0, 33)])
    ax.plot(r, p, "s-", ms=3, label="dHash (distance 0…32)")
    r, p = curve([cos >= t for t in np.linspace(0.5, 1.0, 51)])
    ax.plot(r, p, "^-", ms=3, label="embedding cosine (0.50…1.00)")
    m = _prf(md5eq, truth)
    ax.plot([m["recall"]], [m["precision"]], "k*", ms=12, label="MD5 (exact bytes)")
    d = summary["defaults"]
    ax.plot([d["recall"]], [d["precision"]], "rD", ms=8, label=f"default grouping ({d['rule']['text']})")
    ax.set_xlabel("recall (pairs)")
    ax.set_ylabel("precision (pairs)")
    ax.set_xlim(-0.02, 1.02)
    ax.set_ylim(0, 1.05)
    ax.grid(alpha=0.3)
    title = f"Duplicate detection, {summary['files']} files\nweights: {summary['weights']}"
    if summary["random_init"]:
        title += " (not pretrained CLIP)"
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8, loc="lower left")
    fig.tight_layout()
    with atomic_path(path, suffix=".png") as tmp:
        fig.savefig(tmp)
    plt.close(fig)
    return path
