"""Sizing from measured figures: how many replicas carry a load, and what 1,000 images cost.

    replicas_for_load(answer, per_replica_img_s=25.0, target_img_s=200.0, utilisation=0.7, exercise="…")
    cost_per_1k_images(answer, throughput_img_s=25.0, price_per_hour=0.9, exercise="…")
"""

from __future__ import annotations

import math

from servelab.assignments.checks.answer_tables import close, number
from servelab.assignments.result import CheckResult, reject, run_check


def cost_per_1k_images(answer, *, throughput_img_s: float, price_per_hour: float, rel_tol: float = 0.01,
                       exercise: str, step=None, strict: bool | None = None) -> CheckResult:
    """answer: what 1,000 images cost at this throughput and hourly price, or fn(throughput_img_s, price_per_hour).
    Correct: price_per_hour / (throughput_img_s · 3600) · 1000."""
    expected = price_per_hour / (throughput_img_s * 3600) * 1000

    def judge(value):
        x = number(value, "the cost per 1,000 images")
        if close(x, expected, rel_tol):
            return f"{x:.4g} per 1,000 images at {throughput_img_s:.1f} img/s and {price_per_hour:g}/hour"
        if close(x, expected * 3600, rel_tol) or close(x, expected * 60, rel_tol):
            reject("the price is per hour and the throughput per second: convert one of them")
        if close(x, expected / 1000, rel_tol):
            reject("that is the cost of one image; the question asks for 1,000")
        reject(f"{x:.4g} does not follow from {throughput_img_s:.1f} img/s at {price_per_hour:g} per hour")

    return run_check("cost_per_1k_images", exercise, answer, (throughput_img_s, price_per_hour), judge, step, strict)


def replicas_for_load(answer, *, per_replica_img_s: float, target_img_s: float, utilisation: float = 1.0,
                      exercise: str, step=None, strict: bool | None = None) -> CheckResult:
    """answer: replicas needed, or fn(per_replica_img_s, target_img_s, utilisation).
    Correct: ceil(target_img_s / (per_replica_img_s · utilisation)) — each replica run at most at `utilisation`."""
    expected = max(1, math.ceil(target_img_s / (per_replica_img_s * utilisation) - 1e-9))

    def judge(value):
        x = number(value, "the replica count")
        if x != int(x):
            reject("a replica count is a whole number: round up, a fraction of a pod does not exist")
        if int(x) == expected:
            return (f"{int(x)} replica(s) × {per_replica_img_s:.1f} img/s at ≤{utilisation:.0%} "
                    f"cover {target_img_s:g} img/s")
        if int(x) < expected:
            reject(f"{int(x)} replica(s) at ≤{utilisation:.0%} of {per_replica_img_s:.1f} img/s each do not reach {target_img_s:g} img/s")
        reject(f"{int(x)} replicas reach the target, but fewer would too: round up only once")

    return run_check("replicas_for_load", exercise, answer, (per_replica_img_s, target_img_s, utilisation), judge, step, strict)

