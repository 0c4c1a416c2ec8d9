"""A run's headline sentences ("what this run shows"), kept per run in headlines.json so that two runs' conclusions
can be compared, not only their numbers.

A headline's *claim* is its sentence with every number masked: "tritonhttp ahead by 1.31× (windows 20.1–21.0 vs
15.2–16.0, no overlap)" and "tritonhttp ahead by 1.27× (…)" make the same claim; "… indistinguishable here …"
makes a different one. Why two figures were not ranked (their ranges overlap, one never settled, they lie within the
margin) is evidence, like the numbers: "A and B are indistinguishable here: <reason>" claims the same whatever the
reason (servelab.bench.report says every unranked comparison that way). An interleaved ratio that is not ranked is
one claim, "not ranked", whether its pairs fell on both sides of 1 or all on one side short of the margin: the
direction of a lead the method does not rank is evidence too (a ratio near the margin leads one way in one run and
the other way in the next). `claim(text, strict=True)` keeps that direction, for the stricter count `servelab bench
compare` prints beside it. A lead in every window between figures measured apart keeps its direction, marked "not
ranked". Sentences are built from a run's numbers by the same code in every run, so the words change only when the
conclusion does.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from servelab.bench.report.verdicts import INDISTINGUISHABLE

FILE = "headlines.json"
_NUMBER = re.compile(r"(?<![\w.])[-+−]?\d[\d,]*(?:\.\d+)?(?:e[-+]?\d+)?(?!\w)")
_REASON = re.compile(rf"({INDISTINGUISHABLE}(?: at the top)?): [^;.]*")
# a lead in every pair (or window) that is not ranked, whether its size or only its weakest pairs fall short of the
# margin: one claim, a direction (servelab.bench.report.said), with the reason dropped as for a tie
_UNRANKED_LEAD = re.compile(r"(agree|in every window), (?:below the # % margin we rank (?:figures measured at "
                            r"different times )?by|but not all clear the # % margin we rank by|within the # % this "
                            r"machine drifted during this run \(drift probe\), so the order may be the machine's)")


# an interleaved ratio's reading after its figure ("a ÷ b throughput: #× (pairs #–#); <reading>") when it is not
# ranked: a lead short of the margin, a lead whose pairs never settled, or a tie
_UNRANKED_RATIO = re.compile(rf"(#×(?: \(pairs #–#\))?); [^;.]*?(?:agree, (?:below the # % margin we rank by|but not "
                             rf"all clear the # % margin we rank by)|never settled, so this run does not rank them|"
                             rf"{INDISTINGUISHABLE}: [^;.]*)")


def claim(text: str, *, strict: bool = False) -> str:
    """The sentence with numbers masked as '#', the reasons for not ranking dropped and whitespace collapsed: what
    it concludes, not by how much or on what evidence. An interleaved ratio that is not ranked reads "not ranked"
    (`strict`: with the direction of a lead short of the margin, as said)."""
    masked = _NUMBER.sub("#", text)
    if not strict:
        masked = _UNRANKED_RATIO.sub(r"\1; not ranked", masked)
    masked = _UNRANKED_LEAD.sub(r"\1, not ranked", masked)
    return " ".join(_REASON.sub(r"\1", masked).split())


def record_headline(run_dir: str | Path, key: str, text: str) -> dict:
    """Store (replace) headline `key` (e.g. a notebook id) of the run in <run_dir>/headlines.json; returns the file's
    content. Written to a temporary name and renamed: a crash never leaves half a file."""
    from servelab.bench.results.records import atomic_write

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
    """One row per headline key in either run: same | differs | only in A | only in B; `same_strict`: the same also
    in the direction of every unranked lead (`claim(…, strict=True)`)."""
    rows = []
    for key in sorted(set(a) | set(b)):
        ha, hb = a.get(key), b.get(key)
        if ha and hb:
            verdict = "same" if claim(ha["text"]) == claim(hb["text"]) else "differs"
            strict = claim(ha["text"], strict=True) == claim(hb["text"], strict=True)
        else:
            verdict, strict = ("only in A" if ha else "only in B"), False
        rows.append({"headline": key, "verdict": verdict, "same_strict": strict, "A": (ha or {}).get("text"),
                     "B": (hb or {}).get("text"),
                     "differences": differences(ha["text"], hb["text"]) if verdict == "differs" else []})
    return rows


# a clause that ends in an interleaved ratio's figure ("… throughput: 1.13× (pairs 1.10–1.16)"): its reading follows
_FIGURE_END = re.compile(r"\d×(?: \(pairs [\d.]+–[\d.]+\))?$")
_PAIRS = re.compile(r"([\d.]+)× \(pairs ([\d.]+)–([\d.]+)\)")


def _statements(text: str) -> list[str]:
    """The headline cut into what it states one by one: clauses (at "; " and at sentence ends), a ratio's figure
    kept together with its reading."""
    out: list[str] = []
    for part in re.split(r"; |(?<=[.!?]) (?=[A-Z*])", text):
        if out and _FIGURE_END.search(out[-1]):
            out[-1] += "; " + part
        else:
            out.append(part)
    return out


def differences(text_a: str, text_b: str) -> list[str]:
    """Where two runs' versions of one headline part ways: each statement whose claim differs, with both runs'
    figures ("A: … | B: …"), and for an interleaved ratio whether the two runs' pairs overlap (the same ratio measured
    twice, read differently because the ranking margin runs through its pairs) or not (the ratio itself moved).
    The whole texts when the two are not built alike (a different number of statements)."""
    sa, sb = ([t.rstrip(".") for t in _statements(text)] for text in (text_a, text_b))
    if len(sa) != len(sb):
        return [f"A: {text_a} | B: {text_b}"]
    out = []
    for x, y in zip(sa, sb, strict=True):
        if claim(x) == claim(y):
            continue
        note = ""
        pa, pb = _PAIRS.search(x), _PAIRS.search(y)
        if pa and pb:
            (lo_a, hi_a), (lo_b, hi_b) = (sorted(map(float, m.groups()[1:])) for m in (pa, pb))
            note = (" (the two runs' pairs overlap: one ratio, read differently where the margin runs through it)"
                    if lo_a <= hi_b and lo_b <= hi_a else " (the two runs' pairs do not overlap)")
        out.append(f"A: {x} | B: {y}{note}")
    return out


def emulated_figures(run_dir: str | Path, key: str) -> str:
    """The emulated accelerator's interleaved ratios that notebook `key` measured in this run, as one sentence to
    quote next to its CPU figures ("" when it measured none): each ratio named by its device's label ("emulated
    <profile>"), so a headline never passes an emulation off as a measurement. Read from the run's records:
    ratio ("ab") records of the notebook's experiments (`<key>-…`) whose device is emulated."""
    from servelab.bench.report.sentences import ratio_sentence
    from servelab.bench.results.records import load_records
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
