"""One way to read a comparison: every sentence (servelab.bench.report.sentences) and every exercise check
(servelab.assignments.checks) that says which of two figures was ahead reads it here, so a check and the sentence
under it cannot disagree. docs/METHOD.md says the same in words.

    read_ratio(value, lo, hi, pairs=…) / read_apart((v, lo, hi), (v, lo, hi), margin=…) -> Verdict
    ratio_reading(record), apart_reading(a, b, metric) -> Verdict;  band(x, metric) -> (value, low, high)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import StrEnum

import numpy as np

from servelab.bench.load.stats import MIN_PAIRS_DIRECTION, RATIO_MARGIN


class Reading(StrEnum):
    """What a comparison of A and B shows."""

    RANKED = "ranked"            # every pair (or window) on one side, and past the margin: A is ahead
    CONSISTENT = "consistent"    # every pair on one side, but below the margin (or never settled): a direction
    TOO_CLOSE = "too close"      # pairs on both sides, ranges that overlap, or no spread: no direction


class Why(StrEnum):
    """Why a comparison was not ranked."""

    BOTH_SIDES = "the pairs fall on both sides of 1"
    OVERLAP = "their ranges overlap"
    NO_SPREAD = "no spread recorded"
    TOO_FEW = "too few pairs to show a direction"
    BELOW_MARGIN = "below the margin"
    UNSETTLED = "never settled"


@dataclass(frozen=True)
class Verdict:
    """The reading of one comparison of A with B.

    `ahead`: "a", "b" or None (too close); `lead`: how far the one ahead leads, better ÷ worse − 1 (0.07 = 7 %);
    `margin`: the smallest lead that is ranked; `why`: the reason it was not ranked (None when ranked);
    `unsettled`: the sides ("a", "b") whose windows never settled; `pairs`: window pairs behind a ratio;
    `drifted`: the margin is the machine's measured drift during the run, larger than the floor."""

    reading: Reading
    ahead: str | None = None
    lead: float | None = None
    margin: float = RATIO_MARGIN
    why: Why | None = None
    unsettled: tuple[str, ...] = ()
    pairs: int | None = None
    drifted: bool = False

    @property
    def ranked(self) -> bool:
        return self.reading is Reading.RANKED

    def side(self, a, b, tie=None):
        """`a`, `b` or `tie`: the name of the side ahead (ranked or consistent), `tie` when too close."""
        return {"a": a, "b": b}.get(self.ahead, tie)


def read_ratio(value: float, lo: float, hi: float, *, pairs: int | None = None, settled: bool | None = None,
               margin: float = RATIO_MARGIN) -> Verdict:
    """Read an interleaved A ÷ B ratio: `value` (the geometric mean of the pair ratios) and the lowest and
    highest pair ratio. Every pair past the margin on one side: ranked. Every pair on one side of 1 but not all
    past the margin, or pairs that never settled: consistent, a direction with its size. Pairs on both sides of 1,
    fewer than two pairs, or a direction from fewer than MIN_PAIRS_DIRECTION pairs: too close to call."""
    vals = [value, lo, hi]
    if any(x is None or not np.isfinite(x) or x <= 0 for x in vals) or (pairs is not None and pairs < 2):
        return Verdict(Reading.TOO_CLOSE, margin=margin, why=Why.NO_SPREAD, pairs=pairs)
    if lo <= 1.0 <= hi:
        return Verdict(Reading.TOO_CLOSE, margin=margin, why=Why.BOTH_SIDES, pairs=pairs)
    ahead = "a" if lo > 1.0 else "b"
    lead = value - 1.0 if ahead == "a" else 1.0 / value - 1.0
    weakest = lo - 1.0 if ahead == "a" else 1.0 / hi - 1.0
    kw = dict(ahead=ahead, lead=lead, margin=margin, pairs=pairs)
    if settled is False:
        return Verdict(Reading.CONSISTENT, why=Why.UNSETTLED, unsettled=("a", "b"), **kw)
    if weakest > margin:
        return Verdict(Reading.RANKED, **kw)
    if pairs is not None and pairs < MIN_PAIRS_DIRECTION:
        return Verdict(Reading.TOO_CLOSE, margin=margin, why=Why.TOO_FEW, pairs=pairs)
    return Verdict(Reading.CONSISTENT, why=Why.BELOW_MARGIN, **kw)


def read_apart(a: Sequence[float], b: Sequence[float], *, margin: float, higher_is_better: bool = True,
               settled: tuple[bool | None, bool | None] = (None, None),
               spread: tuple[bool, bool] = (True, True)) -> Verdict:
    """Read two figures measured at different times, each a (value, low, high) band (its windows' min–max).
    Ranges that overlap, or a figure without a spread: too close to call. Ranges apart: every window of one side
    beat every window of the other — a direction, never "indistinguishable"; ranked when the lead (better ÷ worse
    − 1 of the values) exceeds `margin` (the floor, or the machine's drift during the run) and both settled;
    otherwise consistent, with its size."""
    (va, la, ha), (vb, lb, hb) = a, b
    unsettled = tuple(s for s, ok in zip("ab", settled, strict=True) if ok is False)
    if not all(spread):
        return Verdict(Reading.TOO_CLOSE, margin=margin, why=Why.NO_SPREAD, unsettled=unsettled)
    if la <= hb and lb <= ha:
        return Verdict(Reading.TOO_CLOSE, margin=margin, why=Why.UNSETTLED if unsettled else Why.OVERLAP,
                       unsettled=unsettled)
    ahead = "a" if (va > vb) == higher_is_better else "b"
    big, small = max(abs(va), abs(vb)), min(abs(va), abs(vb))
    lead = big / small - 1.0 if small > 0 else float("inf")
    kw = dict(ahead=ahead, lead=lead, margin=margin, unsettled=unsettled)
    if unsettled:
        return Verdict(Reading.CONSISTENT, why=Why.UNSETTLED, **kw)
    if lead > margin:
        return Verdict(Reading.RANKED, **kw)
    return Verdict(Reading.CONSISTENT, why=Why.BELOW_MARGIN, **kw)


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
        lo, hi = max(v - half, 0.0), v + half  # an open loop's spread can pass 2: a measured figure is never negative
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
# (servelab.bench.load.drift: the probe measured before every notebook; on one 2-core VM it moved 10-25 % within a run).
# An interleaved ratio cancels that drift (its sides alternate window by window, in the same minutes), so the probe
# is not its margin; what interleaving does not cancel is the ratio itself moving between runs on a shared machine:
# over ten default lab runs on one 2-core VM, 95 % of 110 interleaved ratios lay within 9.6 % of the same ratio's
# median over those runs (90 % within 7.8 %). A ratio within 10 % of 1 is one the next run can call the other way.
MIN_EFFECT_INTERLEAVED = RATIO_MARGIN
MIN_EFFECT_APART = 0.10
INDISTINGUISHABLE = "indistinguishable here"  # the one phrase of every "not ranked" sentence; the reason follows


def margin(interleaved: bool = False, *, drift: float | None = None) -> float:
    """The smallest difference a sentence ranks: for an interleaved ratio a fixed floor (drift cancels in it); for
    figures measured apart the floor, or `drift` (the machine's measured drift during this run, as
    servelab.lab.step.Step holds it) when larger."""
    if interleaved:
        return MIN_EFFECT_INTERLEAVED
    return max(MIN_EFFECT_APART, 0.0 if drift is None or _nan(drift) else float(drift))


def drifted(drift: float | None) -> bool:
    """Whether the machine's measured `drift`, not the floor, is the margin of figures measured apart."""
    return drift is not None and not _nan(drift) and float(drift) >= MIN_EFFECT_APART


def too_close(interleaved: bool = False, *, drift: float | None = None) -> str:
    """Why two figures closer than `margin` are not ranked, in words."""
    m = margin(interleaved, drift=drift)
    if interleaved:
        return f"within {100 * m:.0f} % of each other, less than such ratios move between runs, too close to call"
    if drifted(drift):
        return (f"within {100 * m:.0f} % of each other, no more than this machine drifted during this run "
                "(drift probe), too close to call")
    return f"within {100 * m:.0f} % of each other, too close to call for figures measured at different times"


def close(a, b, metric: str = "throughput_img_s", *, drift: float | None = None) -> bool:
    """True when two figures differ by no more than `margin(drift=drift)` of the larger."""
    va, vb = band(a, metric)[0], band(b, metric)[0]
    return abs(va - vb) <= margin(drift=drift) * max(abs(va), abs(vb))


def apart_reading(a, b, metric: str = "throughput_img_s", *, higher_is_better: bool | None = None,
                  drift: float | None = None) -> Verdict:
    """How this run reads two of its figures measured at different times (read_apart above, the
    rule every sentence and every exercise check uses): their bands (`band`), whether each settled and carries a
    spread, against `margin(drift=drift)`. Higher is better, except for a latency."""
    if higher_is_better is None:
        higher_is_better = not metric.startswith("latency")
    v = read_apart(band(a, metric), band(b, metric), margin=margin(drift=drift), higher_is_better=higher_is_better,
                   settled=(_stable(a), _stable(b)), spread=(has_band(a, metric), has_band(b, metric)))
    return replace(v, drifted=drifted(drift))


def apart(a, b, metric: str = "throughput_img_s", *, drift: float | None = None) -> bool:
    """Two figures a sentence ranks (`apart_reading` says ranked): both settled, both carry a spread, their bands
    do not overlap, and they differ by more than `margin(drift=drift)`. A figure whose windows never settled is never
    ranked, even with every window on one side: its windows bound where it was going, not where it would have
    settled (a server slowing down for minutes leaves windows far below its steady figure)."""
    return apart_reading(a, b, metric, drift=drift).ranked


def ratio_reading(rec) -> Verdict:
    """How this run reads an interleaved A ÷ B ratio record (or row): read_ratio above on its value,
    pair range, pair count (`repeats`) and whether the pairs settled, against `margin(interleaved=True)`."""
    v, lo, hi = band(rec, "ratio")
    pairs = None
    if not isinstance(rec, (tuple, list)):
        n = rec.get("repeats")
        pairs = None if n is None or _nan(n) else int(n)
    if not has_band(rec, "ratio"):
        pairs = 1
    return read_ratio(v, lo, hi, pairs=pairs, settled=_stable(rec), margin=margin(interleaved=True))
