"""Measurement statistics: numpy percentiles, window stability (perf_analyzer-style), spread, and when the pairs
of an interleaved A/B already give their verdict.

Kept free of any I/O so the numbers can be checked against known distributions in tests. How a comparison is
read from these numbers: servelab.bench.report.verdicts.
"""

from __future__ import annotations

from collections.abc import Sequence

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


# Under no difference at all, n pairs land on one side of 1 with chance 2^(1-n): 50 % with two, 25 % with three. A
# ranking also needs every pair past the margin; a direction alone needs at least three pairs (and the sentence
# says how many).
MIN_PAIRS_DIRECTION = 3


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
