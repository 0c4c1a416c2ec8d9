"""Tables (CSV + Markdown, units in column names), PNG plots and the cost table (run comparison: bench.compare).

Everything here reads records (a list of dicts or a run folder), so notebooks and the CLI share it.
"""

from __future__ import annotations

import math
from pathlib import Path

from servelab.bench.records import atomic_write, load_records, resolve_run_dir
from servelab.bench.stats import RATIO_MARGIN, Reading, Verdict, Why, read_apart, read_ratio

COLUMNS = [
    "experiment", "kind", "server", "backend", "engine", "precision", "variant", "provider", "protocol", "payload",
    "batch", "concurrency",
    "rate_rps", "link", "instances", "max_queue_delay_us", "throughput_img_s", "throughput_min_img_s",
    "throughput_max_img_s", "latency_p50_ms", "latency_p50_min_ms", "latency_p50_max_ms", "latency_p95_ms",
    "latency_p99_ms", "errors", "requests", "repeats", "windows_used", "stable", "spread", "quick", "a", "b", "ratio",
    "ratio_min", "ratio_max", "idle_cpu_pct", "idle_cpu_pct_a", "idle_cpu_pct_b", "idle_paused_a", "idle_paused_b",
    "goal", "loadgen_cpu_pct", "client_process_cpu_pct", "server_cpu_pct", "gpu_util_pct", "gpu_mem_used_mb",
    "compile_s",
    "cpu_pinning", "server_avg_batch", "server_queue_ms", "server_compute_ms",
    "rss_mb", "gpu_mem_mb", "payload_bytes_per_request", "bytes_per_request", "start_to_ready_s",
    "start_to_ready_min_s", "start_to_ready_max_s", "first_request_ms", "backlog", "late_starts",
    "dropped", "rate_held", "value", "value_mean", "value_min", "value_max", "threshold", "met", "available", "note",
]


def _server_value(stats: dict | None, *names):
    if not isinstance(stats, dict):
        return None
    for n in names:
        if stats.get(n) is not None:
            return stats[n]
    return None


def flat_rows(records: list[dict]) -> list[dict]:
    """One flat row per record with the table columns (server_stats/memory fields lifted out)."""
    rows = []
    for r in records:
        s, m = r.get("server_stats"), r.get("memory") or {}
        compute = _server_value(s, "compute_ms", "avg_compute_ms")
        if compute is None and isinstance(s, dict):
            parts = [s.get(k) for k in ("avg_compute_input_ms", "avg_compute_infer_ms", "avg_compute_output_ms")]
            compute = round(sum(p for p in parts if p is not None), 4) if any(p is not None for p in parts) else None
        row = {c: r.get(c) for c in COLUMNS}
        p = r.get("params") or {}
        row["link"] = p.get("link")
        if r.get("server", "").startswith("triton"):
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


def table_frame(rows: list[dict], columns: list[str]):
    """Rows as a pandas DataFrame with exactly these columns (missing values empty; ints stay ints)."""
    import pandas as pd

    return pd.DataFrame([{c: r.get(c) for c in columns} for r in rows], columns=columns, dtype=object)


def frame_markdown(df) -> str:
    """A DataFrame as a Markdown (pipe) table, numbers to 4 significant digits."""
    return df.map(_fmt).to_markdown(index=False, disable_numparse=True) + "\n"


def markdown_table(rows: list[dict], columns: list[str] | None = None) -> str:
    """Records as Markdown; by default only the columns some row fills."""
    if not rows:
        return "(no rows)\n"
    cols = columns or [c for c in rows[0] if any(r.get(c) not in (None, "") for r in rows)]
    return frame_markdown(table_frame(rows, cols))


def csv_text(rows: list[dict], columns: list[str] | None = None) -> str:
    """Records as CSV; by default the first row's columns."""
    return table_frame(rows, columns or (list(rows[0]) if rows else [])).to_csv(index=False)


def write_tables(records: list[dict], out_dir: Path, price_per_hour: float | None = None) -> list[Path]:
    """tables/<experiment>.csv|.md for every experiment (+ all.csv, goals.md, settling.md — which points never
    settled —, cost.csv|md when priced)."""
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
    st = settling_rows(records)
    if st:
        n_bad = sum(1 for r in st if r["stable"] is False)
        atomic_write(out_dir / "settling.md", f"# Settling\n\n{len(st) - n_bad} of {len(st)} measured points settled "
                     f"(their last windows within the tolerance); these did not:\n\n"
                     + markdown_table([r for r in st if r["stable"] is False] or [{"point": "(none)"}]))
        written.append(out_dir / "settling.md")
    t = goals_table(records)
    if t:
        atomic_write(out_dir / "goals.md", markdown_table(t))
        atomic_write(out_dir / "goals.csv", csv_text(t))
        written += [out_dir / "goals.md", out_dir / "goals.csv"]
    if price_per_hour is not None:
        c = cost_table(records, price_per_hour)
        if c:
            atomic_write(out_dir / "cost.md", markdown_table(c))
            atomic_write(out_dir / "cost.csv", csv_text(c))
            written += [out_dir / "cost.md", out_dir / "cost.csv"]
    return written


def settling_rows(records: list[dict]) -> list[dict]:
    """One row per measured point (load, raw, A/B ratio): whether it settled, its windows and range."""
    rows = []
    for r in records:
        if r.get("kind") not in ("load", "raw", "ab") or r.get("available") is False:
            continue
        p = r.get("params") or {}
        bits = [r.get("server"), r.get("engine"), r.get("protocol"), r.get("payload")]
        bits += [f"b={r['batch']}"] if r.get("batch") else []
        bits += [f"c={r['concurrency']}"] if r.get("concurrency") else []
        bits += [f"{k}={p[k]}" for k in ("instances", "max_queue_delay_us") if p.get(k) is not None
                 and str(r.get("server", "")).startswith("triton")]
        lo, hi = (r.get("ratio_min"), r.get("ratio_max")) if r["kind"] == "ab" else (
            r.get("throughput_min_img_s"), r.get("throughput_max_img_s"))
        rows.append({"experiment": r.get("experiment"), "point": " ".join(str(b) for b in bits if b),
                     "stable": r.get("stable"), "windows": r.get("windows_used") or r.get("repeats"),
                     "range": f"{lo:.4g}–{hi:.4g}" if lo is not None and hi is not None else ""})
    return rows


# --- plots ------------------------------------------------------------------------------------------

def _plt():
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


def _save(fig, path: Path) -> Path:
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
    pts = [r for r in records if isinstance(r.get("server_stats"), dict) and r["server_stats"].get("batch_histogram")]
    if not pts:
        return None
    plt = _plt()
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
    path = _save(fig, path)
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
    plt = _plt()
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


# --- goals ---------------------------------------------------------------------------------------

def goals_table(records: list[dict]) -> list[dict]:
    """The goal records as rows: goal, measured (band), required, status (with caveats)."""
    rows = []
    for r in records:
        if r.get("kind") != "derived":
            continue
        met, op = r.get("met"), r.get("op")
        if op is None:
            status = "info"
        elif r.get("value") is None:
            status = "not measured"
        elif met is None:
            status = "undecided (band straddles the goal)"
        else:
            status = "met" if met else "not met"
        caveats = []
        if r.get("inputs_stable") is False:
            caveats.append("inputs not stable")
        if r.get("quick"):
            caveats.append("quick run: not a result")
        lo, hi = r.get("value_min"), r.get("value_max")
        rows.append({"goal": r.get("goal") or r.get("server"), "measured": r.get("value"),
                     "band": f"{lo:.4g}–{hi:.4g}" if lo is not None and hi is not None and lo != hi else "",
                     "required": f"{op} {r.get('threshold')}" if op else "",
                     "status": status + (f" ({'; '.join(caveats)})" if caveats else "")})
    return rows


# --- cost -------------------------------------------------------------------------------------------

def cost_table(records: list[dict], price_per_hour: float, currency: str = "USD") -> list[dict]:
    """images/s of each load/raw record -> cost per 1,000 images at `price_per_hour` for the machine (with the
    window range carried over)."""
    from servelab.bench.stats import cost_per_1000

    rows = []
    for r in records:
        if r.get("kind") in ("load", "raw") and r.get("throughput_img_s"):
            c = cost_per_1000(r["throughput_img_s"], price_per_hour)
            lo, hi = cost_per_1000(r.get("throughput_max_img_s"), price_per_hour), cost_per_1000(
                r.get("throughput_min_img_s"), price_per_hour)
            rows.append({"experiment": r["experiment"], "server": r["server"], "engine": r.get("engine"),
                         "payload": r.get("payload"), "batch": r.get("batch"), "concurrency": r.get("concurrency"),
                         "throughput_img_s": r["throughput_img_s"], "stable": r.get("stable"),
                         f"price_{currency}_per_hour": price_per_hour,
                         f"cost_{currency}_per_1000_img": round(c, 6) if c is not None else None,
                         f"cost_min_{currency}_per_1000_img": round(lo, 6) if lo is not None else None,
                         f"cost_max_{currency}_per_1000_img": round(hi, 6) if hi is not None else None})
    return rows


# --- "what this run shows": sentences that never rank overlapping figures ------------------------------

BANDS = {
    "throughput_img_s": ("throughput_min_img_s", "throughput_max_img_s"),
    "latency_p50_ms": ("latency_p50_min_ms", "latency_p50_max_ms"),
    "ratio": ("ratio_min", "ratio_max"),
    "value": ("value_min", "value_max"),
}


def band(x, metric: str = "throughput_img_s") -> tuple[float, float, float]:
    """(value, low, high) of one figure: a record or a table row (dict / pandas Series) — window min–max for
    throughput_img_s and latency_p50_ms, pair min–max for an A/B record's `ratio`, min–max for a goal's `value`, the
    window spread around a tail latency (`_spread_band`) — or a (value, low, high) tuple. A figure without a band
    gets low = high = value."""
    if isinstance(x, (tuple, list)):
        v, lo, hi = x
        return float(v), float(lo), float(hi)
    get = x.get
    v = float(get(metric))
    lo_key, hi_key = BANDS.get(metric, (f"{metric}_min", f"{metric}_max"))
    lo, hi = get(lo_key), get(hi_key)
    windows = WINDOWS.get(metric)
    if (lo is None or _nan(lo)) and windows and get(windows) is not None:
        w = [float(t) for t in get(windows) if t is not None]
        lo, hi = (min(w), max(w)) if len(w) >= 2 else (None, None)
    if (lo is None or _nan(lo)) and _spread_band(x, metric):  # e.g. a tail latency: the windows' relative spread
        half = float(get("spread")) / 2 * v
        lo, hi = v - half, v + half
    lo = v if lo is None or _nan(lo) else float(lo)
    hi = v if hi is None or _nan(hi) else float(hi)
    return v, min(lo, v), max(hi, v)


def _spread_band(x, metric: str) -> bool:
    """Whether a measured figure without a band of its own (a p95, a p99) takes the record's relative window
    spread (`spread`, (max − min) / mean of the window throughputs) as its band: in a closed loop latency moves
    with 1 / throughput, so the relative spreads match. The exercise checks band such figures the same way."""
    if metric in ("ratio", "value") or isinstance(x, (tuple, list)):
        return False
    sp = x.get("spread")
    return sp is not None and not _nan(sp) and (x.get("repeats") or 2) >= 2


WINDOWS = {"throughput_img_s": "window_throughput_img_s", "latency_p50_ms": "window_latency_p50_ms"}


def has_band(x, metric: str = "throughput_img_s") -> bool:
    """Whether a figure carries a spread (two windows or more, a pair range, or an explicit (v, lo, hi))."""
    if isinstance(x, (tuple, list)):
        return True
    lo_key, hi_key = BANDS.get(metric, (f"{metric}_min", f"{metric}_max"))
    if x.get(lo_key) is not None and not _nan(x.get(lo_key)) and (x.get("repeats") or 2) >= 2:
        return True
    w = x.get(WINDOWS.get(metric, "")) if WINDOWS.get(metric) else None
    if w is not None and not isinstance(w, float) and len([t for t in w if t is not None]) >= 2:
        return True
    return _spread_band(x, metric)


def _nan(v) -> bool:
    try:
        return math.isnan(float(v))
    except (TypeError, ValueError):
        return False


def _stable(x) -> bool | None:
    if isinstance(x, (tuple, list)):
        return None
    s = x.get("stable")
    return None if s is None or _nan(s) else bool(s)


def overlap(a, b, metric: str = "throughput_img_s") -> bool:
    """True when the bands of two figures overlap (then the run cannot rank them)."""
    _, la, ha = band(a, metric)
    _, lb, hb = band(b, metric)
    return la <= hb and lb <= ha


# Differences smaller than these fractions are not called real: a run's window bands measure the noise inside that
# run, not between moments minutes apart on a shared machine, and a small lead one run resolves the next reverses.
# Two figures measured at different times: at least 10 %, or the machine's own drift during this run when larger
# (servelab.bench.drift: the probe measured before every notebook; on one 2-core VM it moved 10-25 % within a run).
# An interleaved ratio cancels that drift (its sides alternate window by window, in the same minutes), so the probe
# is not its margin; what interleaving does not cancel is the ratio itself moving between runs on a shared machine:
# over ten default lab runs on one 2-core VM, 95 % of 110 interleaved ratios lay within 9.6 % of the same ratio's
# median over those runs (90 % within 7.8 %). A ratio within 10 % of 1 is one the next run can call the other way.
MIN_EFFECT_INTERLEAVED = RATIO_MARGIN
MIN_EFFECT_APART = 0.10
# Set per notebook by servelab.lab.step.Step from the run's probe records; None (no probe: a smoke run, a notebook
# run alone) leaves the floor.
_machine_drift: float | None = None
INDISTINGUISHABLE = "indistinguishable here"  # the one phrase of every "not ranked" sentence; the reason follows


def set_machine_drift(drift: float | None) -> None:
    """Use `drift` (a fraction, e.g. 0.2) as the margin of every sentence below, where it exceeds the floors."""
    global _machine_drift
    _machine_drift = None if drift is None or _nan(drift) else float(drift)


def margin(interleaved: bool = False) -> float:
    """The smallest difference a sentence ranks: for an interleaved ratio a fixed floor (drift cancels in it); for
    figures measured apart the floor, or this run's measured drift when larger."""
    if interleaved:
        return MIN_EFFECT_INTERLEAVED
    return max(MIN_EFFECT_APART, _machine_drift or 0.0)


def too_close(interleaved: bool = False) -> str:
    """Why two figures closer than `margin` are not ranked, in words."""
    m = margin(interleaved)
    if interleaved:
        return f"within {100 * m:.0f} % of each other, less than such ratios move between runs, too close to call"
    if _machine_drift is not None and _machine_drift >= m:
        return (f"within {100 * m:.0f} % of each other, no more than this machine drifted during this run "
                "(drift probe), too close to call")
    return f"within {100 * m:.0f} % of each other, too close to call for figures measured at different times"


def close(a, b, metric: str = "throughput_img_s") -> bool:
    """True when two figures differ by no more than `margin()` of the larger."""
    va, vb = band(a, metric)[0], band(b, metric)[0]
    return abs(va - vb) <= margin() * max(abs(va), abs(vb))


def apart_reading(a, b, metric: str = "throughput_img_s", *, higher_is_better: bool | None = None) -> Verdict:
    """How this run reads two of its figures measured at different times (servelab.bench.stats.read_apart, the
    rule every sentence and every exercise check uses): their bands (`band`), whether each settled and carries a
    spread, against `margin()`. Higher is better, except for a latency."""
    if higher_is_better is None:
        higher_is_better = not metric.startswith("latency")
    return read_apart(band(a, metric), band(b, metric), margin=margin(), higher_is_better=higher_is_better,
                      settled=(_stable(a), _stable(b)), spread=(has_band(a, metric), has_band(b, metric)))


def apart(a, b, metric: str = "throughput_img_s") -> bool:
    """Two figures a sentence ranks (`apart_reading` says ranked): both settled, both carry a spread, their bands
    do not overlap, and they differ by more than `margin()`. A figure whose windows never settled is never
    ranked, even with every window on one side: its windows bound where it was going, not where it would have
    settled (a server slowing down for minutes leaves windows far below its steady figure)."""
    return apart_reading(a, b, metric).ranked


def ratio_reading(rec) -> Verdict:
    """How this run reads an interleaved A ÷ B ratio record (or row): servelab.bench.stats.read_ratio on its value,
    pair range, pair count (`repeats`) and whether the pairs settled, against `margin(interleaved=True)`."""
    v, lo, hi = band(rec, "ratio")
    pairs = None
    if not isinstance(rec, (tuple, list)):
        n = rec.get("repeats")
        pairs = None if n is None or _nan(n) else int(n)
    if not has_band(rec, "ratio"):
        pairs = 1
    return read_ratio(v, lo, hi, pairs=pairs, settled=_stable(rec), margin=margin(interleaved=True))


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %" if abs(x) < 0.01 else f"{100 * x:.0f} %"


def _below_margin(v: Verdict, interleaved: bool) -> str:
    m = _pct(v.margin)
    if interleaved:
        return f"below the {m} margin we rank by"
    if _machine_drift is not None and _machine_drift >= v.margin:
        return f"within the {m} this machine drifted during this run (drift probe), so the order may be the machine's"
    return f"below the {m} margin we rank figures measured at different times by"


def said(v: Verdict, name_a: str, name_b: str, *, interleaved: bool) -> str:
    """A reading in words — the phrase both the sentences below and the exercise checks print:
    "B ahead by 7 %, all 4 pairs agree, below the 10 % margin we rank by" (consistent), "A ahead by 31 %, every
    pair past the 10 % margin" (ranked), "A and B are indistinguishable here: their ranges overlap"."""
    names = {"a": name_a, "b": name_b}
    x = names.get(v.ahead)
    other = names.get({"a": "b", "b": "a"}.get(v.ahead))
    every = f"all {v.pairs} pairs" if v.pairs else "every pair"
    unsettled = " and ".join(names[s] for s in v.unsettled)
    if v.reading is Reading.RANKED:
        if interleaved:
            return f"{x} ahead by {_pct(v.lead)}, every pair past the {_pct(v.margin)} margin"
        return f"{x} ahead of {other} by {_pct(v.lead)}, every window apart"
    if v.reading is Reading.CONSISTENT:
        if v.why is Why.UNSETTLED:
            if interleaved:
                return (f"{every} put {x} ahead (by {_pct(v.lead)}), but the pair ratios never settled, so this run "
                        "does not rank them")
            return (f"{x} ahead of {other} in every window (by {_pct(v.lead)}), but {unsettled} never settled (its "
                    "windows kept moving), so this run does not rank them")
        if interleaved and v.lead > v.margin:  # the ratio is past the margin, its weakest pairs are not
            return f"{x} ahead by {_pct(v.lead)}, {every} agree, but not all clear the {_pct(v.margin)} margin we rank by"
        if interleaved:
            return f"{x} ahead by {_pct(v.lead)}, {every} agree, {_below_margin(v, True)}"
        return f"{x} ahead of {other} by {_pct(v.lead)} in every window, {_below_margin(v, False)}"
    return f"{name_a} and {name_b} are {INDISTINGUISHABLE}: {_why_not(v, unsettled, interleaved)}"


def _why_not(v: Verdict, unsettled: str, interleaved: bool) -> str:
    """Why a comparison that is too close to call was not read either way, in words."""
    return {Why.BOTH_SIDES: "the pairs fall on both sides of 1, too close to call",
            Why.OVERLAP: "their ranges overlap",
            Why.NO_SPREAD: "one window pair, no spread recorded" if interleaved else "one window, no spread recorded",
            Why.TOO_FEW: f"only {v.pairs} pairs, too few to show a direction",
            Why.UNSETTLED: f"their ranges overlap and {unsettled} never settled (its windows kept moving)"}[v.why]


def _fmt_band(v: float, lo: float, hi: float, unit: str, digits: int) -> str:
    u = f" {unit}" if unit else ""
    if lo == hi:
        return f"{v:.{digits}f}{u}"
    return f"{v:.{digits}f}{u} ({lo:.{digits}f}–{hi:.{digits}f})"


def _smoke(*named) -> str:
    if any(not isinstance(x, (tuple, list)) and x.get("quick") is True for _, x in named):
        return " (smoke run: these numbers are not results)"
    return ""


def versus(name_a: str, a, name_b: str, b, *, metric: str = "throughput_img_s", unit: str = "img/s",
           digits: int = 1) -> str:
    """One sentence comparing two figures of this run measured at different times (`apart_reading`), e.g.
    "fastapi reached 21.0 img/s (19.5–22.1), above litserve's 15.2 img/s (14.8–15.9)" (ranked); "fastapi reached
    6.3 img/s (6.1–6.5), above litserve's 6.0 img/s (5.9–6.1): fastapi ahead of litserve by 5 % in every window,
    below the 10 % margin …" (every window apart, a smaller lead than the margin: never "indistinguishable");
    or "fastapi (…) and litserve (…) are indistinguishable here: their ranges overlap" (or one window, no spread)."""
    va, la, ha = band(a, metric)
    vb, lb, hb = band(b, metric)
    fa, fb = _fmt_band(va, la, ha, unit, digits), _fmt_band(vb, lb, hb, unit, digits)
    tail = _smoke((name_a, a), (name_b, b))
    v = apart_reading(a, b, metric)
    if v.reading is Reading.TOO_CLOSE:
        unsettled = " and ".join({"a": name_a, "b": name_b}[s] for s in v.unsettled)
        return f"{name_a} ({fa}) and {name_b} ({fb}) are {INDISTINGUISHABLE}: {_why_not(v, unsettled, False)}{tail}"
    text = f"{name_a} reached {fa}, {'above' if va > vb else 'below'} {name_b}'s {fb}"
    if v.ranked:
        return text + tail
    return f"{text}: {said(v, name_a, name_b, interleaved=False)}{tail}"


def ratio_verdict(rec) -> tuple[str | None, str]:
    """Which side of an interleaved A/B ratio record this run ranks ahead — (its name, "") — or (None, the reading
    in words: a consistent lead below the margin with its size, or why it is too close to call). See
    `ratio_reading`; `ratio_reading(rec).side(a, b)` also names the side of a consistent lead."""
    v = ratio_reading(rec)
    if v.ranked:
        return v.side(rec.get("a"), rec.get("b")), ""
    if v.reading is Reading.TOO_CLOSE:
        return None, _why_not(v, "the pairs", True)
    return None, said(v, rec.get("a"), rec.get("b"), interleaved=True)


def _ratio_number(rec, what: str, digits: int) -> str:
    v, lo, hi = band(rec, "ratio")
    return f"{rec.get('a')} ÷ {rec.get('b')} {what}: {v:.{digits}f}×" + (
        f" (pairs {lo:.{digits}f}–{hi:.{digits}f})" if lo != hi else "")


def ratio_figure(rec, *, what: str = "throughput", digits: int = 2) -> str:
    """An interleaved A/B ratio record's (or row's) figure without its reading: "grpc ÷ http throughput: 1.12×
    (pairs 1.05–1.18)", for a sentence that quotes a comparison another sentence ranks."""
    return _ratio_number(rec, what, digits) + _smoke(("", rec))


def ratio_sentence(rec, *, what: str = "throughput", digits: int = 2) -> str:
    """One sentence for an interleaved A/B ratio record (or row): its figure and its reading (`said`): ranked, a
    consistent lead below the margin with its size, or "indistinguishable here" and why."""
    return (_ratio_number(rec, what, digits) + "; " + said(ratio_reading(rec), rec.get("a"), rec.get("b"),
                                                          interleaved=True)
            + _smoke(("", rec)))


def idle_sentence(rec) -> str:
    """What each side of an interleaved A/B ratio record used while idle and whether it was stopped during the
    other's windows: "While idle, fastapi used 0.2 % of one core and litserve used 11 % of one core; each was
    stopped during the other's windows, so neither took CPU from the other"."""
    sides = [(rec.get(k), rec.get(f"idle_cpu_pct_{k}"), rec.get(f"idle_paused_{k}"), rec.get(f"idle_side_{k}"))
             for k in ("a", "b")]
    text = "While idle, " + " and ".join(f"{name} used {pct:g} % of one core" if pct is not None else
                                         f"what {name} used could not be read here" for name, pct, *_ in sides)
    paused = [name for name, _, was, _ in sides if was]
    if len(paused) == 2:
        return text + "; each was stopped during the other's windows, so neither took CPU from the other"
    if paused:
        other, how = next((name, how) for name, _, was, how in sides if not was)
        return text + f"; {paused[0]} was stopped during {other}'s windows, {other} was not: {_reason(how)}"
    return text + "; neither was stopped during the other's windows: " + "; ".join(
        f"{name}, {_reason(how)}" for name, _, _, how in sides)


def _reason(how) -> str:
    """'not paused: <why>' or 'not paused (<why>)' as '<why>'."""
    how = str(how or "")
    for prefix, suffix in (("not paused: ", ""), ("not paused (", ")")):
        if how.startswith(prefix) and how.endswith(suffix):
            return how[len(prefix):len(how) - len(suffix)]
    return how or "not recorded"


def leader(named: dict, *, metric: str = "throughput_img_s", unit: str = "img/s", higher_is_better: bool = True,
           digits: int = 1) -> str:
    """Who led among several figures ({name: record or row}), read pair by pair against the best with
    `apart_reading`: the best is "clear of" the ones it ranks above; a lead in every window below the margin is
    said with its size; the ones whose ranges overlap the best's are named with it as indistinguishable at the
    top. Names are listed in the order given, never in an order a tie decided."""
    given = [(n, x) for n, x in named.items() if x is not None]
    if not given:
        return "nothing measured"
    best_name, best = max(given, key=lambda kv: band(kv[1], metric)[0] * (1 if higher_is_better else -1))
    read = {n: apart_reading(best, x, metric, higher_is_better=higher_is_better) for n, x in given if n != best_name}
    tied = [n for n, v in read.items() if v.reading is Reading.TOO_CLOSE]
    small = [n for n, v in read.items() if v.reading is Reading.CONSISTENT]
    clear = [n for n, v in read.items() if v.ranked]
    tail = _smoke(*given)
    word = "highest" if higher_is_better else "lowest"
    smalls = "; ".join(said(read[n], best_name, n, interleaved=False) for n in small)
    if not tied:
        v, lo, hi = band(best, metric)
        head = f"{best_name} ({_fmt_band(v, lo, hi, unit, digits)}) was {word}"
        if not small:
            return f"{head}, clear of {', '.join(clear) or 'nothing else'}{tail}"
        return head + (f", clear of {', '.join(clear)}" if clear else "") + f"; {smalls}{tail}"
    top = [(n, x) for n, x in given if n == best_name or n in tied]
    unsettled = [n for n in tied if read[n].unsettled] + ([best_name] if any("a" in read[n].unsettled for n in tied)
                                                         else [])
    why = (f"{' and '.join(n for n, _ in top if n in unsettled)} never settled (its windows kept moving)" if unsettled
           else "one window, no spread recorded" if any(read[n].why is Why.NO_SPREAD for n in tied)
           else "their ranges overlap")
    names = [f"{n} ({_fmt_band(*band(x, metric), unit, digits)})" for n, x in top]
    text = f"{', '.join(names[:-1])} and {names[-1]} are {INDISTINGUISHABLE} at the top: {why}"
    return text + (f"; {smalls}" if small else "") + tail
