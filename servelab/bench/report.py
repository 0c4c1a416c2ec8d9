"""Tables (CSV + Markdown, units in column names), PNG plots, run comparison and the cost table.

Everything here reads records (a list of dicts or a run folder), so notebooks and the CLI share it.
"""

from __future__ import annotations

import math
from pathlib import Path

from servelab.bench.records import atomic_write, load_records, resolve_run_dir

KEY = ("experiment", "kind", "target", "backend", "engine", "provider", "protocol", "payload", "batch", "concurrency",
       "rate_rps")
COLUMNS = [
    "experiment", "kind", "target", "backend", "engine", "provider", "protocol", "payload", "batch", "concurrency",
    "rate_rps", "instances", "max_queue_delay_us", "throughput_img_s", "latency_p50_ms", "latency_p95_ms", "latency_p99_ms", "errors", "requests",
    "repeats", "windows_used", "stable", "spread", "server_avg_batch", "server_queue_ms", "server_compute_ms",
    "rss_mb", "gpu_mem_mb", "payload_bytes_per_request", "bytes_per_request", "start_to_ready_s", "first_request_ms", "backlog", "late_starts",
    "dropped", "rate_held", "value", "threshold", "met", "available", "note",
]


def _server_value(server: dict | None, *names):
    if not isinstance(server, dict):
        return None
    for n in names:
        if server.get(n) is not None:
            return server[n]
    return None


def flat_rows(records: list[dict]) -> list[dict]:
    """One flat row per record with the table columns (server/memory fields lifted out)."""
    rows = []
    for r in records:
        s, m = r.get("server"), r.get("memory") or {}
        compute = _server_value(s, "compute_ms", "avg_compute_ms")
        if compute is None and isinstance(s, dict):
            parts = [s.get(k) for k in ("avg_compute_input_ms", "avg_compute_infer_ms", "avg_compute_output_ms")]
            compute = round(sum(p for p in parts if p is not None), 4) if any(p is not None for p in parts) else None
        row = {c: r.get(c) for c in COLUMNS}
        p = r.get("params") or {}
        if r.get("target", "").startswith("triton"):
            row.update(instances=p.get("instances"), max_queue_delay_us=p.get("max_queue_delay_us"))
        row.update(server_avg_batch=_server_value(s, "avg_batch", "average_batch", "avg_executed_batch"),
                   server_queue_ms=_server_value(s, "avg_queue_ms", "queue_ms"), server_compute_ms=compute,
                   rss_mb=m.get("rss_mb"), gpu_mem_mb=m.get("gpu_mem_mb"))
        rows.append(row)
    return rows


def _fmt(v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    if isinstance(v, float):
        return f"{v:.4g}" if abs(v) < 1e5 else f"{v:.0f}"
    return str(v).replace("|", "\\|").replace("\n", " ")


def markdown_table(rows: list[dict], columns: list[str] | None = None) -> str:
    if not rows:
        return "(no rows)\n"
    cols = columns or [c for c in rows[0] if any(r.get(c) not in (None, "") for r in rows)]
    out = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    out += ["| " + " | ".join(_fmt(r.get(c)) for c in cols) + " |" for r in rows]
    return "\n".join(out) + "\n"


def csv_text(rows: list[dict], columns: list[str] | None = None) -> str:
    import csv
    import io

    cols = columns or (list(rows[0]) if rows else [])
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=cols, extrasaction="ignore")
    w.writeheader()
    for r in rows:
        w.writerow({c: ("" if r.get(c) is None else r.get(c)) for c in cols})
    return buf.getvalue()


def write_tables(records: list[dict], out_dir: Path, price_per_hour: float | None = None) -> list[Path]:
    """tables/<experiment>.csv|.md for every experiment (+ all.csv, targets.md, cost.csv|md when priced)."""
    from servelab.bench.experiments import cost_table, targets_table

    out_dir = Path(out_dir) / "tables"
    written = []
    rows = flat_rows(records)
    for exp in sorted({r["experiment"] for r in rows}):
        sub = [r for r in rows if r["experiment"] == exp]
        cols = [c for c in COLUMNS if any(r.get(c) not in (None, "") for r in sub)]
        for suffix, text in ((".csv", csv_text(sub, cols)), (".md", f"# {exp}\n\n" + markdown_table(sub, cols))):
            p = out_dir / f"{exp}{suffix}"
            atomic_write(p, text)
            written.append(p)
    atomic_write(out_dir / "all.csv", csv_text(rows, COLUMNS))
    written.append(out_dir / "all.csv")
    t = targets_table(records)
    if t:
        atomic_write(out_dir / "targets.md", markdown_table(t))
        atomic_write(out_dir / "targets.csv", csv_text(t))
        written += [out_dir / "targets.md", out_dir / "targets.csv"]
    if price_per_hour is not None:
        c = cost_table(records, price_per_hour)
        if c:
            atomic_write(out_dir / "cost.md", markdown_table(c))
            atomic_write(out_dir / "cost.csv", csv_text(c))
            written += [out_dir / "cost.md", out_dir / "cost.csv"]
    return written


# --- plots ------------------------------------------------------------------------------------------

def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _label(r: dict) -> str:
    parts = [r.get("target"), r.get("engine"), r.get("protocol") if str(r.get("target", "")).startswith("triton") else None,
             r.get("payload")]
    extra = r.get("params", {}).get("max_queue_delay_us")
    if extra is not None:
        parts.append(f"delay {extra}us")
    inst = r.get("params", {}).get("instances")
    if inst is not None:
        parts.append(f"x{inst}")
    return " ".join(str(p) for p in parts if p)


def _save(fig, path: Path) -> Path:
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    atomic_write(path, buf.getvalue())
    return path


def plot_latency_throughput(records: list[dict], path: Path) -> Path | None:
    """p50 (solid) and p99 (dashed) latency against throughput, one curve per target, points labelled c=N."""
    pts = [r for r in records if r.get("kind") == "load" and r.get("throughput_img_s") and r.get("latency_p50_ms")]
    if not pts:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    groups: dict[str, list] = {}
    for r in pts:
        groups.setdefault(f"{r['experiment']}: {_label(r)}", []).append(r)
    for name, rs in groups.items():
        rs = sorted(rs, key=lambda r: (r.get("concurrency") or 0, r.get("rate_rps") or 0, r.get("batch") or 0))
        x = [r["throughput_img_s"] for r in rs]
        line, = ax.plot(x, [r["latency_p50_ms"] for r in rs], "o-", label=f"{name} p50")
        ax.plot(x, [r["latency_p99_ms"] for r in rs], "x--", color=line.get_color(), alpha=0.6)
        for r in rs:
            tag = f"c={r['concurrency']}" if r.get("concurrency") else f"{r.get('rate_rps')}/s"
            ax.annotate(tag, (r["throughput_img_s"], r["latency_p50_ms"]), fontsize=7, xytext=(3, 3),
                        textcoords="offset points")
    ax.set_xlabel("throughput (images/s)")
    ax.set_ylabel("latency (ms) — p50 solid, p99 dashed")
    ax.set_yscale("log")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    ax.set_title(_weights_title(records, "Latency vs throughput"))
    path = _save(fig, path)
    plt.close(fig)
    return path


def _weights_title(records, title):
    w = {r.get("weights") for r in records if r.get("weights")}
    return f"{title}\n(weights: {', '.join(sorted(w))})" if w else title


def plot_batch_histogram(records: list[dict], path: Path) -> Path | None:
    """Executed batch sizes on the server (servelab /metrics or Triton stats) for each load point."""
    pts = [r for r in records if isinstance(r.get("server"), dict) and r["server"].get("batch_histogram")]
    if not pts:
        return None
    plt = _plt()
    n = len(pts)
    cols = min(n, 4)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.6 * rows), squeeze=False)
    for ax, r in zip(axes.ravel(), pts):
        h = r["server"]["batch_histogram"]
        keys = sorted(h, key=lambda k: float(str(k).lstrip("<=").replace("+Inf", "inf")))
        ax.bar([str(k) for k in keys], [h[k] for k in keys])
        ax.set_title(f"{_label(r)} c={r.get('concurrency')}", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.set_xlabel("executed batch size", fontsize=7)
    for ax in axes.ravel()[n:]:
        ax.axis("off")
    fig.suptitle(_weights_title(records, "Server-side batch sizes (executions)"), fontsize=9)
    fig.tight_layout()
    path = _save(fig, path)
    plt.close(fig)
    return path


BREAKDOWN = (("avg_queue_ms", "queue"), ("avg_compute_input_ms", "compute input"),
             ("avg_compute_infer_ms", "compute infer"), ("avg_compute_output_ms", "compute output"))


def plot_server_breakdown(records: list[dict], path: Path) -> Path | None:
    """Stacked bars of Triton's per-request server time: queue / compute input / infer / output (ms)."""
    pts = [r for r in records if isinstance(r.get("server"), dict)
           and any(r["server"].get(k) is not None for k, _ in BREAKDOWN)]
    if not pts:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(max(6, 0.6 * len(pts) + 2), 4))
    labels = [f"{_label(r)}\nc={r.get('concurrency')}" for r in pts]
    bottom = [0.0] * len(pts)
    for key, name in BREAKDOWN:
        vals = [float(r["server"].get(key) or 0.0) for r in pts]
        ax.bar(labels, vals, bottom=bottom, label=name)
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set_ylabel("ms per request (server side)")
    ax.tick_params(axis="x", labelsize=6, rotation=60)
    ax.legend(fontsize=7)
    ax.set_title(_weights_title(records, "Server-side time breakdown"), fontsize=9)
    path = _save(fig, path)
    plt.close(fig)
    return path


def plot_scaling(records: list[dict], path: Path) -> Path | None:
    """Throughput and scaling efficiency (throughput / (n × throughput at n=1)) against instance count."""
    pts = [r for r in records if r.get("kind") == "load" and r.get("params", {}).get("instances") is not None
           and r.get("throughput_img_s")]
    if not pts:
        return None
    plt = _plt()
    groups: dict[str, list] = {}
    for r in pts:
        groups.setdefault(f"{r['target']} c={r.get('concurrency')}", []).append(r)
    groups = {k: v for k, v in groups.items() if len({r["params"]["instances"] for r in v}) > 1}
    if not groups:  # one instance count only: nothing to scale
        return None
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(9, 3.8))
    for name, rs in groups.items():
        rs = sorted(rs, key=lambda r: r["params"]["instances"])
        n = [r["params"]["instances"] for r in rs]
        thr = [r["throughput_img_s"] for r in rs]
        base = next((t for k, t in zip(n, thr) if k == 1), thr[0] / n[0])
        a1.plot(n, thr, "o-", label=name)
        a2.plot(n, [t / (k * base) for k, t in zip(n, thr)], "o-", label=name)
    a1.set_xlabel("instances")
    a1.set_ylabel("throughput (images/s)")
    a2.set_xlabel("instances")
    a2.set_ylabel("scaling efficiency")
    a2.axhline(1.0, color="grey", lw=0.8, ls=":")
    for a in (a1, a2):
        a.grid(alpha=0.3)
        a.legend(fontsize=7)
    fig.suptitle(_weights_title(records, "Instance-count scaling"), fontsize=9)
    fig.tight_layout()
    path = _save(fig, path)
    plt.close(fig)
    return path


def write_plots(records: list[dict], out_dir: Path) -> list[Path]:
    out_dir = Path(out_dir) / "plots"
    made = [
        plot_latency_throughput(records, out_dir / "latency_vs_throughput.png"),
        plot_batch_histogram(records, out_dir / "batch_size_histogram.png"),
        plot_server_breakdown(records, out_dir / "server_breakdown.png"),
        plot_scaling(records, out_dir / "scaling_efficiency.png"),
    ]
    return [p for p in made if p]


def write_report(run, price_per_hour: float | None = None) -> list[Path]:
    """Tables and plots for a run (a Run, a run id or a folder)."""
    d = run.dir if hasattr(run, "dir") else resolve_run_dir(run)
    records = load_records(d)
    return write_tables(records, d, price_per_hour) + write_plots(records, d)


# --- compare ----------------------------------------------------------------------------------------

METRICS = (("throughput_img_s", "higher"), ("latency_p50_ms", "lower"), ("latency_p99_ms", "lower"))


def compare(run_a, run_b, min_noise: float = 0.02) -> list[dict]:
    """Match records of two runs by their parameters; delta per metric, marked noise when within the spread.

    The noise band of a pair is the larger of the two records' measured window spread ((max-min)/mean of
    throughput across windows) and `min_noise`; a change inside it is reported as `noise`, not as a result.
    """
    a = load_records(run_a) if not isinstance(run_a, list) else run_a
    b = load_records(run_b) if not isinstance(run_b, list) else run_b

    def key(r):
        return tuple(r.get(k) for k in KEY) + (tuple(sorted((k, str(v)) for k, v in (r.get("params") or {}).items()
                                                            if k in ("instances", "max_queue_delay_us"))),)

    ia = {key(r): r for r in a if r.get("kind") in ("load", "raw", "cold-start")}
    rows = []
    for r in b:
        if r.get("kind") not in ("load", "raw", "cold-start"):
            continue
        k = key(r)
        ra = ia.get(k)
        if ra is None:
            continue
        band = max([x for x in (ra.get("spread"), r.get("spread")) if x is not None] + [min_noise])
        for m, better in METRICS:
            va, vb = ra.get(m), r.get(m)
            if va in (None, 0) or vb is None:
                continue
            rel = (vb - va) / va
            if abs(rel) <= band:
                verdict = "noise"
            else:
                improved = rel > 0 if better == "higher" else rel < 0
                verdict = "better" if improved else "worse"
            rows.append({"experiment": r["experiment"], "point": _point(r), "metric": m, "A": va, "B": vb,
                         "delta_pct": round(rel * 100, 2), "noise_band_pct": round(band * 100, 2), "verdict": verdict})
    return rows


def _point(r: dict) -> str:
    bits = [r.get("target"), r.get("engine"), r.get("protocol"), r.get("payload")]
    if r.get("batch"):
        bits.append(f"b={r['batch']}")
    if r.get("concurrency"):
        bits.append(f"c={r['concurrency']}")
    if r.get("rate_rps"):
        bits.append(f"{r['rate_rps']}/s")
    for k in ("instances", "max_queue_delay_us"):
        if (r.get("params") or {}).get(k) is not None:
            bits.append(f"{k}={r['params'][k]}")
    return " ".join(str(x) for x in bits if x)
