"""The ratio of two sides measured in rounds, each round running both back to back (the order reversed every other
round, so a drift falls on both alike): an `ab` record with the geometric mean of the rounds' ratios and their
min–max, read by servelab.bench.report (`step.ratio(rec)`) like any interleaved A/B.

    rec = ratio_record(step.run, "09-choice-vs-baseline", "your choice", "baseline", [31.0, 29.5], [20.1, 19.0])
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from servelab.bench.load.stats import is_stable


def order(labels: Sequence[str], k: int) -> list[str]:
    """The order of round `k`: as given in even rounds, reversed in odd ones (A B, B A, A B…)."""
    return list(labels) if k % 2 == 0 else list(labels)[::-1]


def ratio_record(run, experiment: str, a: str, b: str, a_values: Sequence[float], b_values: Sequence[float], *,
                 tolerance: float = 0.1, stable_last: int = 2, quick: bool = False, note: str = "", **fields) -> dict:
    """The `ab` record of `a` against `b` (higher is better: throughputs): a ÷ b per round, their geometric mean
    as `ratio`, min–max as `ratio_min`/`ratio_max`, the rounds as `repeats`; `fields` name the point (batch…).
    Settled (`stable`) when the last `stable_last` rounds' ratios agree within `tolerance`, the rule the lab's
    interleaved windows follow (servelab.bench.load.LoadOpts.stable_windows)."""
    pairs = [x / y for x, y in zip(a_values, b_values, strict=True) if x and y]
    value = math.exp(sum(math.log(p) for p in pairs) / len(pairs)) if pairs else None
    params = {**fields.pop("params", {}), "ab": {"pairs": len(pairs), "order": "alternating rounds", "a": a, "b": b}}
    return run.record(experiment, kind="ab", server=f"{a} / {b}", a=a, b=b, ratio=value,
                      ratio_min=min(pairs) if pairs else None, ratio_max=max(pairs) if pairs else None,
                      repeats=len(pairs), stable=len(pairs) >= 2 and is_stable(pairs, tolerance, min(stable_last, len(pairs))),
                      quick=quick, params=params,
                      note=note or "A ÷ B of two sides run back to back, round after round; min–max over the rounds",
                      **fields)
