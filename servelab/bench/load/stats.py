"""Latency / throughput statistics: numpy percentiles, window stability (perf_analyzer-style), spread.

Kept free of any I/O so the numbers can be checked against known distributions in tests.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

PERCENTILES = (50, 95, 99)

# The smallest A ÷ B an interleaved ratio is ranked by (servelab.bench.report.margin): over ten default lab runs on
# one 2-core VM, 95 % of 110 interleaved ratios lay within 9.6 % of the same ratio's median over those runs, so a
# ratio within 10 % of 1 is one the next run can call the other way.
RATIO_MARGIN = 0.10


def ratio_decided(ratios: Sequence[float], margin: float = RATIO_MARGIN, least: int = 2) -> bool:
    """True when `least` or more pair ratios already give the verdict more pairs would: every one of them clear of
    the margin on the same side (A or B ahead by more than the margin), or every one well inside it (within
    margin / 2 of 1: too close to call — two pairs on one side that close read as too few to show a direction,
    see `read_ratio`). A band that straddles the margin is left to the agreement rule. More pairs would not make a
    clear verdict safer: what moves it is the ratio itself moving between runs."""
    v = np.asarray(ratios, dtype=np.float64)
    if v.size < least or np.any(~np.isfinite(v)) or np.any(v <= 0):
        return False
    lo, hi = float(v.min()), float(v.max())
    return lo > 1 + margin or hi < 1 - margin or (lo >= 1 - margin / 2 and hi <= 1 + margin / 2)


# --- one way to read a comparison -------------------------------------------------------------------------------
# Every sentence (servelab.bench.report) and every exercise check (servelab.assignments.checks) that says which of
# two figures was ahead reads it here, so a check and the sentence under it cannot disagree. docs/METHOD.md says
# the same in words.


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


# Under no difference at all, n pairs land on one side of 1 with chance 2^(1-n): 50 % with two, 25 % with three. A
# ranking also needs every pair past the margin; a direction alone needs at least three pairs (and the sentence
# says how many).
MIN_PAIRS_DIRECTION = 3


@dataclass(frozen=True)
class Verdict:
    """The reading of one comparison of A with B.

    `ahead`: "a", "b" or None (too close); `lead`: how far the one ahead leads, better ÷ worse − 1 (0.07 = 7 %);
    `margin`: the smallest lead that is ranked; `why`: the reason it was not ranked (None when ranked);
    `unsettled`: the sides ("a", "b") whose windows never settled; `pairs`: window pairs behind a ratio."""

    reading: Reading
    ahead: str | None = None
    lead: float | None = None
    margin: float = RATIO_MARGIN
    why: Why | None = None
    unsettled: tuple[str, ...] = ()
    pairs: int | None = None

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


def latency_summary(latencies_s: Sequence[float]) -> dict:
    """Seconds in -> milliseconds out: p50/p95/p99/mean/std/min/max (linear-interpolated numpy percentiles).

    An empty sample gives None for every statistic (never a made-up zero).
    """
    a = np.asarray(latencies_s, dtype=np.float64) * 1000.0
    keys = [f"latency_p{p}_ms" for p in PERCENTILES] + ["latency_mean_ms", "latency_std_ms", "latency_min_ms", "latency_max_ms"]
    if a.size == 0:
        return {k: None for k in keys}
    pct = np.percentile(a, PERCENTILES)
    vals = list(pct) + [a.mean(), a.std(ddof=1) if a.size > 1 else 0.0, a.min(), a.max()]
    return {k: round(float(v), 4) for k, v in zip(keys, vals, strict=False)}


def relative_spread(values: Sequence[float]) -> float | None:
    """(max - min) / mean of the values, as a fraction; None when it cannot be computed."""
    v = np.asarray([x for x in values if x is not None], dtype=np.float64)
    if v.size == 0 or v.mean() == 0:
        return None
    return float((v.max() - v.min()) / v.mean())


def is_stable(values: Sequence[float], tolerance: float = 0.1, last: int = 3) -> bool:
    """True when the last `last` values each lie within `tolerance` (fraction) of their mean.

    perf_analyzer's rule: it keeps measuring windows until throughput and latency of the last three
    windows are each within the stability percentage of their average.
    """
    if len(values) < last:
        return False
    v = np.asarray(values[-last:], dtype=np.float64)
    if np.any(~np.isfinite(v)):
        return False
    m = v.mean()
    if m == 0:
        return bool(np.all(v == 0))
    return bool(np.all(np.abs(v - m) <= tolerance * abs(m)))


def cost_per_1000(images_per_s: float | None, price_per_hour: float) -> float | None:
    """Price per hour and sustained images/s -> cost of 1,000 images (same currency as the price)."""
    if not images_per_s or images_per_s <= 0:
        return None
    return price_per_hour / (images_per_s * 3600.0) * 1000.0
