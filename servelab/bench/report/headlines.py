"""A run's headlines ("what this run shows"), kept per run in headlines.json so that two runs' conclusions can be
compared, not only their numbers: each notebook's headline is stored as its text and the findings it states
(servelab.bench.report.findings: what against what, the figures and ranges, the reading, who is ahead, why), and
two runs' headlines are compared finding by finding, by key and field — never by reading the text.

    record_headline(run_dir, "07", text, findings)  ->  {"07": {"text": …, "verdicts": [finding fields, …]}}
    compare_headlines(load_headlines(a), load_headlines(b)) -> one row per headline: same | differs | …

A headline recorded without findings (by a version of servelab that kept only the text) is not comparable: its
row says so, and it is left out of "every headline the same".
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from servelab.bench.report.findings import Finding, Kind, ranges_overlap, same_conclusion
from servelab.errors import InvalidValue

FILE = "headlines.json"
NOT_COMPARABLE = "not comparable"


def record_headline(run_dir: str | Path, key: str, text: str, findings: Iterable[Finding] = ()) -> dict:
    """Store (replace) headline `key` (e.g. a notebook id) of the run in <run_dir>/headlines.json: its text and the
    findings it states; returns the file's content. Written to a temporary name and renamed: a crash never leaves
    half a file."""
    from servelab.bench.results.records import atomic_write

    path = Path(run_dir) / FILE
    data = load_headlines(run_dir)
    data[str(key)] = {"text": text, "verdicts": _keyed(f.to_dict() for f in findings)}
    atomic_write(path, json.dumps(dict(sorted(data.items())), indent=2, ensure_ascii=False) + "\n")
    return data


def _keyed(found: Iterable[dict]) -> list[dict]:
    """The findings once each; two different findings with one key (the same names compared twice in one
    headline, on different records) keep both, the later keyed "<key> (2)", "(3)", … in the order stated."""
    out: list[dict] = []
    stated: list[dict] = []
    times: dict[str, int] = {}
    for d in found:
        if d in stated:
            continue
        stated.append(d)
        times[d["key"]] = n = times.get(d["key"], 0) + 1
        out.append(d if n == 1 else dict(d, key=f"{d['key']} ({n})"))
    return out


def load_headlines(run_dir: str | Path) -> dict:
    """{key: {"text", "verdicts"}} of a run (older runs: {"text", …} without "verdicts"); empty when it recorded
    none."""
    path = Path(run_dir) / FILE
    if not path.exists():
        return {}
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise InvalidValue(f"{path}: not JSON ({exc})") from None


def findings(headline: dict) -> dict[str, Finding] | None:
    """A stored headline's findings by key; None when it was recorded without them."""
    if "verdicts" not in headline:
        return None
    return {d["key"]: Finding.from_dict(d) for d in headline["verdicts"]}


def compare_headlines(a: dict, b: dict) -> list[dict]:
    """One row per headline key in either run: same | differs | only in A | only in B | not comparable (no
    findings stored in one run); `differences`: each finding that differs or is stated in one run only, with both
    runs' figures."""
    rows = []
    for key in sorted(set(a) | set(b)):
        ha, hb = a.get(key), b.get(key)
        diffs: list[str] = []
        if not (ha and hb):
            verdict = "only in A" if ha else "only in B"
        else:
            fa, fb = findings(ha), findings(hb)
            if fa is None or fb is None:
                verdict = NOT_COMPARABLE
                diffs = [f"no verdict data in {'A' if fa is None else 'B'}: its headline was recorded as text only"]
            else:
                diffs = differences(fa, fb)
                verdict = "differs" if diffs else "same"
        rows.append({"headline": key, "verdict": verdict, "A": (ha or {}).get("text"), "B": (hb or {}).get("text"),
                     "differences": diffs})
    return rows


def differences(a: dict[str, Finding], b: dict[str, Finding]) -> list[str]:
    """Where two runs' findings of one headline part ways: each finding stated in one run only, and each whose
    reading or side ahead differs, with both runs' figures and whether their ranges overlap (the same figure read
    differently where the margin runs through it) or not (the figure itself moved)."""
    out = []
    for key in list(a) + [k for k in b if k not in a]:
        x, y = a.get(key), b.get(key)
        if x is None or y is None:
            out.append(f"{key}: only in {'A' if x else 'B'}")
        elif not same_conclusion(x, y):
            overlap = ranges_overlap(x, y)
            word = "pairs" if x.kind is Kind.RATIO else "ranges"
            note = (f"the two runs' {word} overlap: one figure, read differently where the margin runs through it"
                    if overlap and all(overlap.values()) else
                    f"the two runs' {word} do not overlap" + (
                        f" for {', '.join(n for n, ok in overlap.items() if not ok)}" if len(overlap) > 1 else ""))
            out.append(f"{key}: A {_reading(x)} | B {_reading(y)} ({note})")
    return out


def _reading(f: Finding) -> str:
    figures = ", ".join(f"{n} {v:.{f.digits}f} ({lo:.{f.digits}f}–{hi:.{f.digits}f})" for n, (v, lo, hi) in
                        f.figures.items())
    who = (f"{', '.join(f.tied)} tied at the top" if f.tied else f"{f.ahead} ahead" if f.ahead else "neither ahead")
    return f"{f.verdict.reading}, {who}: {figures}"


def emulated_findings(run_dir: str | Path, key: str) -> list[Finding]:
    """The emulated accelerator's interleaved ratios that notebook `key` measured in this run, as findings: ratio
    ("ab") records of the notebook's experiments (`<key>-…`) whose device is emulated."""
    from servelab.bench.report.sentences import ratio_finding
    from servelab.bench.results.records import load_records
    from servelab.model.device_profile import is_emulated

    try:
        recs = load_records(run_dir)
    except FileNotFoundError:
        return []
    return [ratio_finding(r) for r in recs if r.get("kind") == "ab" and str(r.get("experiment", "")).startswith(
        f"{key}-") and is_emulated((r.get("params") or {}).get("device"))]


def emulated_figures(found: list[Finding]) -> str:
    """Emulated ratios (`emulated_findings`) as one sentence to quote next to a notebook's CPU figures ("" when
    there are none): each named by its device's label ("emulated <profile>"), so a headline never passes an
    emulation off as a measurement."""
    from servelab.bench.report.sentences import say

    if not found:
        return ""
    parts = [f"{f.device}" + (f", {f.context.removeprefix('c=')} clients" if f.context else "") + f": {say(f)}"
             for f in found]
    return "On the emulated accelerator (an emulation, not a GPU measurement): " + "; ".join(parts) + "."
