"""PNG plots of a run's records: latency against throughput, batch sizes, Triton's server-side breakdown, scaling.

    write_plots(records, out_dir) -> [paths];  plot_latency_throughput(records, path) -> path | None
"""

from __future__ import annotations

import math
from pathlib import Path

from servelab.bench.results.records import atomic_write


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _label(r: dict) -> str:
    parts = [r.get("server"), r.get("engine"), r.get("protocol") if str(r.get("server", "")).startswith("triton") else None,
             r.get("payload")]
    extra = r.get("params", {}).get("max_queue_delay_us")
    if extra is not None:
        parts.append(f"delay {extra}us")
    inst = r.get("params", {}).get("instances")
    if inst is not None:
        parts.append(f"x{inst}")
    return " ".join(str(p) for p in parts if p)


def save_figure(fig, path: Path) -> Path:
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    atomic_write(path, buf.getvalue())
    return path


def plot_latency_throughput(records: list[dict], path: Path) -> Path | None:
    """p50 (solid) and p99 (dashed) latency against throughput, one curve per server, points labelled c=N."""
    pts = [r for r in records if r.get("kind") == "load" and r.get("throughput_img_s") and r.get("latency_p50_ms")]
    if not pts:
        return None
    plt = pyplot()
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
    path = save_figure(fig, path)
    plt.close(fig)
    return path


def _weights_title(records, title):
    w = {r.get("weights") for r in records if r.get("weights")}
    return f"{title}\n(weights: {', '.join(sorted(w))})" if w else title


def plot_batch_histogram(records: list[dict], path: Path) -> Path | None:
    """Executed batch sizes on the server (servelab /metrics or Triton stats) for each load point."""
    pts = [r for r in records if isinstance(r.get("server_stats"), dict) and r["server_stats"].get("batch_histogram")]
    if not pts:
        return None
    plt = pyplot()
    n = len(pts)
    cols = min(n, 4)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.6 * rows), squeeze=False)
    for ax, r in zip(axes.ravel(), pts, strict=False):
        h = r["server_stats"]["batch_histogram"]
        keys = sorted(h, key=lambda k: float(str(k).lstrip("<=").replace("+Inf", "inf")))
        ax.bar([str(k) for k in keys], [h[k] for k in keys])
        ax.set_title(f"{_label(r)} c={r.get('concurrency')}", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.set_xlabel("executed batch size", fontsize=7)
    for ax in axes.ravel()[n:]:
        ax.axis("off")
    fig.suptitle(_weights_title(records, "Server-side batch sizes (executions)"), fontsize=9)
    fig.tight_layout()
    path = save_figure(fig, path)
    plt.close(fig)
    return path


BREAKDOWN = (("avg_queue_ms", "queue"), ("avg_compute_input_ms", "compute input"),
             ("avg_compute_infer_ms", "compute infer"), ("avg_compute_output_ms", "compute output"))


def plot_server_breakdown(records: list[dict], path: Path) -> Path | None:
    """Stacked bars of Triton's per-request server time: queue / compute input / infer / output (ms)."""
    pts = [r for r in records if isinstance(r.get("server_stats"), dict)
           and any(r["server_stats"].get(k) is not None for k, _ in BREAKDOWN)]
    if not pts:
        return None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(max(6, 0.6 * len(pts) + 2), 4))
    labels = [f"{_label(r)}\nc={r.get('concurrency')}" for r in pts]
    bottom = [0.0] * len(pts)
    for key, name in BREAKDOWN:
        vals = [float(r["server_stats"].get(key) or 0.0) for r in pts]
        ax.bar(labels, vals, bottom=bottom, label=name)
        bottom = [b + v for b, v in zip(bottom, vals, strict=False)]
    ax.set_ylabel("ms per request (server side)")
    ax.tick_params(axis="x", labelsize=6, rotation=60)
    ax.legend(fontsize=7)
    ax.set_title(_weights_title(records, "Server-side time breakdown"), fontsize=9)
    path = save_figure(fig, path)
    plt.close(fig)
    return path


def plot_scaling(records: list[dict], path: Path) -> Path | None:
    """Throughput and scaling efficiency (throughput / (n × throughput at n=1)) against instance count."""
    pts = [r for r in records if r.get("kind") == "load" and r.get("params", {}).get("instances") is not None
           and r.get("throughput_img_s")]
    if not pts:
        return None
    plt = pyplot()
    groups: dict[str, list] = {}
    for r in pts:
        groups.setdefault(f"{r['server']} c={r.get('concurrency')}", []).append(r)
    groups = {k: v for k, v in groups.items() if len({r["params"]["instances"] for r in v}) > 1}
    if not groups:  # one instance count only: nothing to scale
        return None
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(9, 3.8))
    for name, rs in groups.items():
        rs = sorted(rs, key=lambda r: r["params"]["instances"])
        n = [r["params"]["instances"] for r in rs]
        thr = [r["throughput_img_s"] for r in rs]
        base = next((t for k, t in zip(n, thr, strict=False) if k == 1), thr[0] / n[0])
        a1.plot(n, thr, "o-", label=name)
        a2.plot(n, [t / (k * base) for k, t in zip(n, thr, strict=False)], "o-", label=name)
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
    path = save_figure(fig, path)
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
