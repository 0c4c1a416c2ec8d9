"""Predict, then measure: the student writes down which of two things will be ahead, the run measures both,
and the check reads the table the way the run's own sentences read it (servelab.bench.report), so a check and
the sentence under it cannot disagree.

    bands = measured_bands(records, key="server")            # value, lo, hi, source, settled, margin per server
    reading(bands, "fastapi", "triton-http")                  # a servelab.bench.report Verdict
    outcome(answer, records, key="server", a="fastapi", b="triton-http", prediction=prediction_04, exercise="04.1")

A lead the run does not rank is a tie: bands that overlap, bands apart by no more than the run's margin, or a
side that never settled.
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from servelab.assignments.checks.answer_tables import at_words, frame, norm, row_figures, where
from servelab.assignments.result import CheckResult, reject, run_check
from servelab.bench.report import Why, band, has_band, read_apart, said
from servelab.bench.report import margin as ranking_margin
from servelab.errors import InvalidValue

TIE = "tie"
NO_SPREAD = "one value (no spread measured)"


def measured_bands(table, *, key: str, metric: str = "throughput_img_s", at: Mapping | None = None,
                   margin: float | None = None) -> pd.DataFrame:
    """Per value of `key`: the mean `metric` and the band [lo, hi] this run measured around it.

    Each row's band and whether it carries a spread are the bench's own (servelab.bench.report.band and
    has_band: the windows' min–max, per-window lists, or the relative window spread around a tail latency).
    Rows of one key pool their bands; several rows of one key form a band even where no row has one. `source`
    says where the band came from ("windows", "rows", or one value with no spread). `settled`: whether every
    row's windows settled (None where the table does not say). `margin`: the smallest lead (better ÷ worse − 1)
    the run ranks, the same in every row (the run's, a lab step's `margin()`; None: the floor)."""
    df = where(frame(table), at)
    out = []
    for k, rows in df.groupby(key, sort=False):
        figures = [f for f in row_figures(rows) if not pd.isna(pd.to_numeric(f.get(metric), errors="coerce"))]
        if not figures:
            continue
        bands = [band(f, metric) for f in figures]
        vals = [v for v, _, _ in bands]
        source = ("windows" if any(has_band(f, metric) for f in figures)
                  else "rows" if len(figures) > 1 else NO_SPREAD)
        settled = [f["stable"] for f in figures if "stable" in f]
        out.append({key: k, "value": sum(vals) / len(vals), "lo": min(lo for _, lo, _ in bands),
                    "hi": max(hi for _, _, hi in bands), "source": source,
                    "settled": (all(bool(x) for x in settled) if settled else None),
                    "margin": ranking_margin() if margin is None else float(margin)})
    cols = ["value", "lo", "hi", "source", "settled", "margin"]
    return pd.DataFrame(out).set_index(key) if out else pd.DataFrame(columns=cols)


def reading(bands: pd.DataFrame, a, b, higher_is_better: bool = True, *, margin: float | None = None):
    """The run's reading of `a` against `b` from `measured_bands`: servelab.bench.report.read_apart, the rule
    every sentence of the run uses. Ranges that overlap are too close to call; ranges apart give a direction,
    ranked when the lead exceeds the run's margin and both settled. A table that records no spread for any row
    (numbers a notebook computed, say) is read as exact numbers. `margin`: the run's (a lab step's `margin()`,
    which counts the machine's drift during the run); None: the bands' `margin` column, else the floor."""
    ra, rb = bands.loc[a], bands.loc[b]
    exact = all(str(x) == NO_SPREAD for x in bands["source"])
    spread = tuple(exact or r["source"] != NO_SPREAD for r in (ra, rb))

    def settled(r):
        x = r.get("settled")
        return None if x is None or pd.isna(x) else bool(x)

    if margin is None:
        margin = float(ra["margin"]) if "margin" in bands.columns else ranking_margin()
    return read_apart((ra["value"], ra["lo"], ra["hi"]), (rb["value"], rb["lo"], rb["hi"]), margin=margin,
                      higher_is_better=higher_is_better, settled=(settled(ra), settled(rb)), spread=spread)


def outcome(answer, table, *, key: str, a, b, metric: str = "throughput_img_s", higher_is_better: bool = True,
            at: Mapping | None = None, prediction=None, exercise: str, step=None, strict: bool | None = None) -> CheckResult:
    """Predict, then measure. answer: fn(bands) -> `a`, `b` or "tie", where bands = measured_bands(table,
    key=key, metric=metric, at=at) (columns value, lo, hi, source, settled, margin; one row per `key`), or that
    value itself.

    Correct: the side the run ranks ahead — its band wholly better than the other's, by more than the run's
    margin (better ÷ worse − 1 of the values), both settled — else "tie": the reading the run's sentences use
    (`reading`); the message says it in the same words, with the size of a lead below the margin.
    `prediction` — what the student wrote down before the measurement — is not graded: the result says whether
    it held, and keeps it for the instructor."""
    bands = measured_bands(table, key=key, metric=metric, at=at, margin=step.margin() if hasattr(step, "margin") else None)
    for k in (a, b):
        if k not in bands.index:
            raise InvalidValue(f"no {key}={k} rows with {metric} in the table (has {', '.join(map(str, bands.index))})")
    bands = bands.loc[[a, b]]
    read = reading(bands, a, b, higher_is_better)
    expected = read.side(a, b, TIE) if read.ranked else TIE
    pct = f"{100 * read.margin:.0f} %"
    choices = {norm(a): a, norm(b): b, TIE: TIE}
    better = "higher" if higher_is_better else "lower"

    pdetail = _prediction_detail(prediction, expected, choices)
    hidden = {"prediction": pdetail["prediction"]}  # a failed answer's record names no outcome

    def judge(value):
        if value is None or norm(value) not in choices:
            reject(f"answer with {a!r}, {b!r} or {TIE!r}, got {value!r}", hidden)
        got = choices[norm(value)]
        if got != expected:
            if expected == TIE and read.why is Why.NO_SPREAD:
                reject("this table records no spread for one of the two: a single window cannot be told from noise",
                       hidden)
            if expected == TIE and read.unsettled:
                reject("one of the two never settled (`settled` is False): this run ranks no lead it did not settle",
                       hidden)
            if expected == TIE and read.why is Why.BELOW_MARGIN:
                reject(f"the bands are apart, but the lead (better ÷ worse − 1) is below this run's {pct} margin "
                       "(the `margin` column): the run does not rank it", hidden)
            if expected == TIE:
                reject("the two measured bands overlap: a difference inside the spread is no difference", hidden)
            if got == TIE:
                reject(f"the two bands do not overlap, both settled, and the lead (better ÷ worse − 1) is past this "
                       f"run's {pct} margin: the run ranks it", hidden)
            reject(f"look at which band is better: for {metric}, {better} is better", hidden)
        ra, rb = bands.loc[a], bands.loc[b]
        text = (f"{a}: {metric} {ra['value']:.4g} [{ra['lo']:.4g}–{ra['hi']:.4g}], {b}: {rb['value']:.4g} "
                f"[{rb['lo']:.4g}–{rb['hi']:.4g}]{at_words(at)} → {expected} ({said(read, a, b, interleaved=False)})")
        return text + _prediction_note(prediction, expected, choices), pdetail

    return run_check("outcome", exercise, answer, (bands,), judge, step, strict)


def _prediction_note(prediction, expected, choices) -> str:
    if prediction is None or norm(prediction) not in choices:
        return "; no prediction was written down before the measurement"
    held = choices[norm(prediction)] == expected
    return f"; your prediction ({prediction}) {'held' if held else 'did not hold — explain why in a sentence'}"


def _prediction_detail(prediction, expected, choices) -> dict:
    made = prediction is not None and norm(prediction) in choices
    return {"prediction": prediction if made else None, "measured": expected,
            "prediction_held": (choices[norm(prediction)] == expected) if made else None}
