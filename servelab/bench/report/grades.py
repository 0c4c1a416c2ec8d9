"""The one reader of the words a lesson grades a ratio with ("flat", "a gain", "close to 8×", "far from 8×"), so
that a word never rests on a threshold typed into a notebook. The margin is always passed in: a lesson takes it
from its Step (this run's margin for figures measured apart, or the fixed one for interleaved ratios).

    g = grade(gain, lo, hi, margin=step.margin(), target=8)   # -> Grade.FAR_FROM_TARGET
    if g is Grade.FLAT: …;  words(g, target=8)                 # -> "far from 8×"

Two figures are within the margin of each other when the larger ÷ the smaller − 1 is no more than it, the rule
`read_apart` ranks a lead by. With a range (lo, hi), the ratio is within the margin of 1 (or of the target) when any
part of the range is: a ratio whose range reaches "no change" is not graded a gain.
"""

from __future__ import annotations

from enum import StrEnum

from servelab.errors import InvalidValue


class Grade(StrEnum):
    """How a ratio (new ÷ old, measured ÷ expected) reads against 1 and, optionally, against a target."""

    FLAT = "flat"                          # within the margin of 1: no change this run can call
    GAIN = "gain"                          # above 1 by more than the margin (no target)
    LOSS = "loss"                          # below 1 by more than the margin
    CLOSE_TO_TARGET = "close to target"    # within the margin of the target
    FAR_FROM_TARGET = "far from target"    # a gain, but short of the target by more than the margin
    ABOVE_TARGET = "above target"          # past the target by more than the margin


def _reaches(lo: float, hi: float, y: float, margin: float) -> bool:
    """Whether some value in [lo, hi] lies within `margin` of y."""
    return lo <= y * (1.0 + margin) and hi >= y / (1.0 + margin)


def grade(ratio: float, lo: float | None = None, hi: float | None = None, *, margin: float,
          target: float | None = None) -> Grade:
    """Grade `ratio` (with its range lo–hi, when measured) against 1 and, given a `target` (the ratio the
    hardware or the arithmetic promises, e.g. 8 for eight times the images per request), against the target.
    `margin` is a fraction (0.1 = 10 %)."""
    if margin < 0:
        raise InvalidValue(f"margin {margin} is negative: pass a fraction such as 0.1")
    if ratio is None or ratio <= 0:
        raise InvalidValue(f"ratio {ratio} is not a positive number: grade a ratio of two measured figures")
    lo = ratio if lo is None else min(lo, ratio)
    hi = ratio if hi is None else max(hi, ratio)
    if _reaches(lo, hi, 1.0, margin):
        return Grade.FLAT
    if ratio < 1.0:
        return Grade.LOSS
    if target is None:
        return Grade.GAIN
    if _reaches(lo, hi, target, margin):
        return Grade.CLOSE_TO_TARGET
    return Grade.ABOVE_TARGET if ratio > target else Grade.FAR_FROM_TARGET


def words(g: Grade, *, target: float | None = None) -> str:
    """The grade as a lesson says it: "flat", "a gain", "a loss", "close to 8×", "far from 8×", "above 8×"."""
    t = f"{target:g}×" if target is not None else "the target"
    return {Grade.FLAT: "flat", Grade.GAIN: "a gain", Grade.LOSS: "a loss", Grade.CLOSE_TO_TARGET: f"close to {t}",
            Grade.FAR_FROM_TARGET: f"far from {t}", Grade.ABOVE_TARGET: f"above {t}"}[g]
