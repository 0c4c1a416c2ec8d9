"""A run's headline sentences ("what this run shows"), kept per run in headlines.json so that two runs' conclusions
can be compared, not only their numbers.

A headline's *claim* is its sentence with every number masked: "tritonhttp ahead by 1.31× (windows 20.1–21.0 vs
15.2–16.0, no overlap)" and "tritonhttp ahead by 1.27× (…)" make the same claim; "… indistinguishable here …"
makes a different one, and a consistent lead that is not ranked ("http ahead by 7 %, all 4 pairs agree, below
the 10 % margin we rank by", or "…, but not all clear the 10 % margin we rank by") a third: the three readings of
servelab.bench.stats, see docs/METHOD.md. Why two figures were not ranked (their ranges overlap, one never settled,
they lie within the margin) is evidence, like the numbers: "A and B are indistinguishable here: <reason>" claims the
same whatever the reason (servelab.bench.report says every unranked comparison that way). Sentences are built from a
run's numbers by the same code in every run, so the words change only when the conclusion does.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from servelab.bench.report import INDISTINGUISHABLE

FILE = "headlines.json"
_NUMBER = re.compile(r"(?<![\w.])[-+−]?\d[\d,]*(?:\.\d+)?(?:e[-+]?\d+)?(?!\w)")
_REASON = re.compile(rf"({INDISTINGUISHABLE}(?: at the top)?): [^;.]*")
# a lead in every pair (or window) that is not ranked, whether its size or only its weakest pairs fall short of the
# margin: one claim, a direction (servelab.bench.report.said), with the reason dropped as for a tie
_UNRANKED_LEAD = re.compile(r"(agree|in every window), (?:below the # % margin we rank (?:figures measured at "
                            r"different times )?by|but not all clear the # % margin we rank by|within the # % this "
                            r"machine drifted during this run \(drift probe\), so the order may be the machine's)")


def claim(text: str) -> str:
    """The sentence with numbers masked as '#', the reasons for not ranking dropped and whitespace collapsed: what
    it concludes, not by how much or on what evidence."""
    masked = _UNRANKED_LEAD.sub(r"\1, not ranked", _NUMBER.sub("#", text))
    return " ".join(_REASON.sub(r"\1", masked).split())


def record_headline(run_dir: str | Path, key: str, text: str) -> dict:
    """Store (replace) headline `key` (e.g. a notebook id) of the run in <run_dir>/headlines.json; returns the file's
    content. Written to a temporary name and renamed: a crash never leaves half a file."""
    from servelab.bench.records import atomic_write

    path = Path(run_dir) / FILE
    data = load_headlines(run_dir)
    data[str(key)] = {"text": text, "claim": claim(text)}
    atomic_write(path, json.dumps(dict(sorted(data.items())), indent=2, ensure_ascii=False) + "\n")
    return data


def load_headlines(run_dir: str | Path) -> dict:
    """{key: {"text", "claim"}} of a run; empty when it recorded none."""
    path = Path(run_dir) / FILE
    if not path.exists():
        return {}
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not JSON ({exc})") from None


def compare_headlines(a: dict, b: dict) -> list[dict]:
    """One row per headline key in either run: same | differs | only in A | only in B."""
    rows = []
    for key in sorted(set(a) | set(b)):
        ha, hb = a.get(key), b.get(key)
        if ha and hb:
            verdict = "same" if claim(ha["text"]) == claim(hb["text"]) else "differs"
        else:
            verdict = "only in A" if ha else "only in B"
        rows.append({"headline": key, "verdict": verdict, "A": (ha or {}).get("text"), "B": (hb or {}).get("text")})
    return rows


def emulated_figures(run_dir: str | Path, key: str) -> str:
    """The emulated accelerator's interleaved ratios that notebook `key` measured in this run, as one sentence to
    quote next to its CPU figures ("" when it measured none): each ratio named by its device's label ("emulated
    <profile>"), so a headline never passes an emulation off as a measurement. Read from the run's records:
    ratio ("ab") records of the notebook's experiments (`<key>-…`) whose device is emulated."""
    from servelab.bench.records import load_records
    from servelab.bench.report import ratio_sentence
    from servelab.model.device_profile import is_emulated

    try:
        recs = load_records(run_dir)
    except FileNotFoundError:
        return ""
    ratios = [r for r in recs if r.get("kind") == "ab" and str(r.get("experiment", "")).startswith(f"{key}-")
              and is_emulated((r.get("params") or {}).get("device"))]
    if not ratios:
        return ""
    parts = [f"{r['params']['device']}" + (f", {r['concurrency']} clients" if r.get("concurrency") else "")
             + f": {ratio_sentence(r)}" for r in ratios]
    return "On the emulated accelerator (an emulation, not a GPU measurement): " + "; ".join(parts) + "."
