"""Latency summary (units, keys, empty samples), the stability rule, spread and cost, and the one reading of a
comparison (ranked, consistent but small, too close to call) that sentences and exercise checks share."""

import numpy as np
import pytest

from servelab.bench.load import is_stable, latency_summary, ratio_decided, relative_spread
from servelab.bench.report import cost_per_1000


def test_percentiles_of_a_known_ramp():
    # 1..100 ms as seconds: numpy's linear interpolation gives p50 = 50.5, p95 = 95.05, p99 = 99.01
    s = latency_summary(np.arange(1, 101) / 1000.0)
    assert s["latency_p50_ms"] == pytest.approx(50.5)
    assert s["latency_p95_ms"] == pytest.approx(95.05)
    assert s["latency_p99_ms"] == pytest.approx(99.01)
    assert s["latency_mean_ms"] == pytest.approx(50.5)
    assert s["latency_min_ms"] == pytest.approx(1.0) and s["latency_max_ms"] == pytest.approx(100.0)


def test_empty_sample_gives_none_not_zero():
    s = latency_summary([])
    assert all(v is None for v in s.values())


def test_stability_rule_last_three_within_tolerance():
    assert is_stable([50, 100, 101, 99], tolerance=0.05)
    assert not is_stable([100, 101, 120], tolerance=0.05)
    assert not is_stable([100, 100], tolerance=0.05)  # fewer than three windows is never stable
    assert not is_stable([100, float("nan"), 100], tolerance=0.5)


def test_spread_and_cost():
    assert relative_spread([90, 100, 110]) == pytest.approx(0.2)
    assert relative_spread([]) is None
    # 36 img/s at 3.60 per hour -> 36*3600 = 129,600 images per 3.60 -> 0.0277.. per 1,000
    assert cost_per_1000(36.0, 3.60) == pytest.approx(3.60 / 129.6)
    assert cost_per_1000(0, 3.6) is None


def test_a_ratio_is_decided_only_far_clear_of_the_margin_or_well_inside_it():
    assert ratio_decided([1.31, 1.12]) and ratio_decided([0.71, 0.88])            # A, B ahead by > 10 %
    assert ratio_decided([0.97, 1.04])                                             # within 5 %: indistinguishable
    assert not ratio_decided([1.31])                                               # one pair decides nothing
    assert not ratio_decided([1.08, 1.30]) and not ratio_decided([0.98, 1.08])     # straddling the 10 % margin
    assert not ratio_decided([1.06, 1.09]) and not ratio_decided([0.91, 0.94])     # between 5 % and 10 %
    assert not ratio_decided([0.7, 1.3]) and not ratio_decided([1.3, float("nan")])
