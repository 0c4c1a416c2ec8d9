"""Tables (CSV + Markdown, units in column names), the goals and cost tables, and a run's report files.

    write_report(run) -> [paths];  markdown_table(rows, columns);  goals_table(records);  cost_table(records, price)

Everything here reads records (a list of dicts or a run folder), so notebooks and the CLI share it.
"""

from __future__ import annotations

import math
from pathlib import Path

from servelab.bench.report.plots import write_plots
from servelab.bench.results.records import atomic_write, load_records, resolve_run_dir

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


def cost_per_1000(images_per_s: float | None, price_per_hour: float) -> float | None:
    """Price per hour and sustained images/s -> cost of 1,000 images (same currency as the price)."""
    if not images_per_s or images_per_s <= 0:
        return None
    return price_per_hour / (images_per_s * 3600.0) * 1000.0
