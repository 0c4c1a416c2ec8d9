"""report.md (+ report.html) for one lab run: every notebook with its status, the environment fingerprint,
and every table the notebooks wrote (tables/*.md), grouped by notebook, plus links to the plots.

Built only from files in results/<run-id>/ (run.json, environment.json, tables/, plots/), so it can be
rewritten at any time — after a failure too — and always describes what is on disk.
"""

from __future__ import annotations

import csv
import datetime as dt
import html
import json
from pathlib import Path

from servelab.fileio import atomic_write


def _load(path: Path, default):
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return default


def _flat(d: dict, prefix: str = "") -> list[tuple[str, str]]:
    rows = []
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            rows += _flat(v, key + ".")
        elif isinstance(v, (list, tuple)):
            rows.append((key, ", ".join(map(str, v))))
        else:
            rows.append((key, str(v)))
    return rows


def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def failed_cell(entry: dict) -> str:
    """`cell In [7] (`run = step.table(...)`)` — the execution count Jupyter shows, and the cell's first line."""
    if entry.get("cell") is None:
        return "no particular cell (the kernel or papermill failed)"
    label = f"In [{entry['execution_count']}]" if entry.get("execution_count") else f"#{entry['cell']}"
    src = entry.get("cell_source")
    return f"cell {label}" + (f" (`{src}`)" if src else "")


def _status(e: dict) -> str:
    s = e.get("status", "?")
    if s == "failed":
        return f"**failed** at {failed_cell(e)}: {e.get('error', '')}"
    return s


def table_owner(name: str, ids: list[str]) -> str | None:
    """Which notebook a table belongs to: tables are named `<notebook id>_<what>` (e.g. `04_queue_delay`)."""
    head = name.split("_", 1)[0]
    return head if head in ids else None


def _conditions(out_dir: Path) -> list[str]:
    """How the client reached the servers and what the load generator itself cost, from this run's records:
    the links (and how they were shaped), CPU pinning, and the load generator's CPU use across points."""
    records = []
    path = out_dir / "records.jsonl"
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    points = [r for r in records if r.get("kind") in ("load", "ab")]
    if not points:
        return []
    links: dict[str, set] = {}
    for r in (r for r in points if r.get("kind") == "load"):  # an A/B record names its sides, not a link
        p = r.get("params") or {}
        links.setdefault(p.get("link") or "loopback", set()).add(p.get("link_shaping") or "none (loopback)")
    run = _load(out_dir / "run.json", {})
    pinning = [run["cpu_pinning"]] if run.get("cpu_pinning") else sorted(
        {r.get("cpu_pinning") for r in points if r.get("cpu_pinning")})
    lines = ["", "## How the client reached the servers", ""]
    lines += [f"- link `{name}`: {', '.join(sorted(how))}" for name, how in sorted(links.items())]
    lines.append(f"- CPU pinning: {'; '.join(pinning) if pinning else 'not recorded'}")
    from servelab.bench.load.drift import describe, probe_values

    probes = probe_values(records)
    if probes:  # figures measured minutes apart differ by at least this much on this machine
        lines.append(f"- the machine's own speed, {describe(probes)}")
    for key, what in (("loadgen_cpu_pct", "load generator threads"), ("client_process_cpu_pct", "client process"),
                      ("server_cpu_pct", "server process")):
        vals = [r[key] for r in points if isinstance(r.get(key), (int, float))]
        if vals:
            lines.append(f"- CPU of the {what}: {min(vals):.0f}–{max(vals):.0f} % of one core across "
                         f"{len(vals)} points (median {sorted(vals)[len(vals) // 2]:.0f} %)")
    return lines


def _time_line(run: dict, entries: list[dict]) -> list[str]:
    """Notebook time against the budgets, and the wall time from start to finish (stack start and drift probes
    included)."""
    secs = [e["seconds"] for e in entries if isinstance(e.get("seconds"), (int, float))]
    if not secs:
        return []
    budgets = [e.get("budget_s") for e in entries]
    text = f"{sum(secs) / 60:.1f} min in the notebooks"
    if all(isinstance(b, (int, float)) for b in budgets):
        text += f" (budget {sum(budgets) / 60:.0f} min)"
    try:
        wall = dt.datetime.fromisoformat(run["finished"]) - dt.datetime.fromisoformat(run["started"])
        text += f"; {wall.total_seconds() / 60:.1f} min from start to finish"
    except (KeyError, TypeError, ValueError):
        pass
    return ["", f"Time: {text}."]


def build_markdown(out_dir: Path) -> str:
    out_dir = Path(out_dir)
    run = _load(out_dir / "run.json", {})
    env = _load(out_dir / "environment.json", {})
    entries = run.get("notebooks", [])
    ids = [e["id"] for e in entries]
    lines = [f"# servelab lab report — run `{run.get('run_id', out_dir.name)}`", ""]
    lines += [f"- profile: `{run.get('profile', '?')}` · place: `{run.get('place', '?')}`",
              f"- started {run.get('started', '?')} · finished {run.get('finished') or 'not finished'}",
              f"- weights: {env.get('weights', env.get('weights_label', 'see environment'))}",
              "- every number below was measured in this run; tables carry the hardware and versions they ran on.",
              ""]
    if run.get("profile") == "smoke":
        lines += ["> **Smoke profile:** a functional check with a few requests per point — these numbers are not "
                  "results. Use `--profile default` (or `full` on a quiet machine) for figures.", ""]
    lines += ["## Notebooks", "", "| notebook | status | seconds | budget (s) | executed notebook |",
              "|---|---|---|---|---|"]
    for e in entries:
        out = e.get("output", "")
        link = f"[{Path(out).name}]({out})" if out and (out_dir / out).exists() else "–"
        budget = e.get("budget_s")
        over = budget is not None and isinstance(e.get("seconds"), (int, float)) and e["seconds"] > budget
        lines.append(f"| {e['name']} | {_cell(_status(e))} | {e.get('seconds', '–')} | "
                     f"{'–' if budget is None else f'{budget:.0f}'}{' **over**' if over else ''} | {link} |")
    lines += _time_line(run, entries)
    not_run = []
    for path in sorted((out_dir / "tables").glob("*_not_run.csv")):
        with path.open() as fh:
            not_run += [(path.stem.split("_", 1)[0], r) for r in csv.DictReader(fh)]
    if not_run:
        lines += ["", "## Not run in this run", "", "| notebook | what | why | instead |", "|---|---|---|---|"]
        lines += [f"| {nb} | {_cell(r.get('not run', ''))} | {_cell(r.get('why', ''))} | {_cell(r.get('instead', ''))} |"
                  for nb, r in not_run]
    endpoints = run.get("endpoints") or {}
    urls = {k: v for k, v in endpoints.items() if k.endswith("_url")}
    if urls:
        lines += ["", "## Servers measured", ""] + [f"- {k}: `{v}`" for k, v in urls.items()]
    lines += _conditions(out_dir)
    lines += ["", "## Environment", ""]
    if env:
        lines += ["| key | value |", "|---|---|"] + [f"| {_cell(k)} | {_cell(v)} |" for k, v in _flat(env)]
    else:
        lines.append("_no environment fingerprint was written_")
    tables = sorted((out_dir / "tables").glob("*.md"))
    plots = sorted((out_dir / "plots").glob("*.png"))
    lines += ["", "## Tables", ""]
    if not tables:
        lines.append("_no tables were written_")
    for nb_id in ids + [None]:
        mine = [t for t in tables if table_owner(t.stem, ids) == nb_id]
        pics = [p for p in plots if table_owner(p.stem, ids) == nb_id]
        shows = out_dir / "tables" / f"{nb_id}_shows.txt"
        if not mine and not pics:
            continue
        title = next((e["name"] for e in entries if e["id"] == nb_id), "other")
        lines += [f"### {title}", ""]
        if nb_id and shows.exists():
            lines += [f"**What this run shows.** {shows.read_text().strip()}", ""]
        for t in mine:
            lines += [f"#### {t.stem}  ([csv](tables/{t.stem}.csv))", "", t.read_text().strip(), ""]
        for pic in pics:
            lines += [f"![{pic.stem}](plots/{pic.name})", ""]
    return "\n".join(lines).rstrip() + "\n"


def to_html(markdown: str, title: str) -> str:
    try:
        from markdown_it import MarkdownIt

        body = MarkdownIt("commonmark").enable("table").render(markdown)
    except ImportError:  # markdown-it-py comes with typer/rich; keep the report readable without it
        body = f"<pre>{html.escape(markdown)}</pre>"
    style = ("body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em}"
             "table{border-collapse:collapse;font-size:.85em;margin:.5em 0}td,th{border:1px solid #ccc;"
             "padding:2px 6px}th{background:#f3f3f3}img{max-width:100%}code{background:#f6f6f6}")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{style}</style></head><body>{body}</body></html>\n")


def write_report(out_dir: Path) -> Path:
    """Write report.md and report.html (temp + rename); returns the .md path."""
    out_dir = Path(out_dir)
    md = build_markdown(out_dir)
    atomic_write(out_dir / "report.md", md)
    atomic_write(out_dir / "report.html", to_html(md, f"servelab lab {out_dir.name}"))
    return out_dir / "report.md"
