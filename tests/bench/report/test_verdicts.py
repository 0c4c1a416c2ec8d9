"""The one reading of a comparison (ranked, consistent but small, too close to call) that sentences and exercise
checks share: read_ratio (interleaved) and read_apart (measured at different times)."""

import pytest

from servelab.bench.load import ratio_decided
from servelab.bench.report import Reading, Why, read_apart, read_ratio
from servelab.bench.report.verdicts import band


def test_every_pair_past_the_margin_on_one_side_is_a_ranking():
    v = read_ratio(1.31, 1.2, 1.4, pairs=2)
    assert v.reading is Reading.RANKED and v.ahead == "a" and v.lead == pytest.approx(0.31)
    v = read_ratio(0.7, 0.65, 0.75, pairs=3)
    assert v.ranked and v.ahead == "b" and v.lead == pytest.approx(1 / 0.7 - 1)


def test_every_pair_on_one_side_inside_the_margin_is_a_consistent_small_lead_with_its_size():
    v = read_ratio(1.07, 1.02, 1.12, pairs=4)  # batching on ÷ off: every pair above 1, the weakest 2 % above
    assert v.reading is Reading.CONSISTENT and v.ahead == "a" and v.why is Why.BELOW_MARGIN
    assert v.lead == pytest.approx(0.07) and v.side("on", "off", "tie") == "on"
    v = read_ratio(0.93, 0.90, 0.96, pairs=3)
    assert v.reading is Reading.CONSISTENT and v.ahead == "b" and v.lead == pytest.approx(1 / 0.93 - 1)
    # the ratio past the margin, its weakest pair not: a direction, not a ranking
    assert read_ratio(1.15, 1.05, 1.25, pairs=3).reading is Reading.CONSISTENT


def test_pairs_on_both_sides_of_one_are_too_close_to_call():
    v = read_ratio(1.02, 0.97, 1.06, pairs=5)
    assert v.reading is Reading.TOO_CLOSE and v.ahead is None and v.why is Why.BOTH_SIDES
    assert v.side("a", "b", "tie") == "tie"
    assert read_ratio(1.3, 0.7, 1.9, pairs=5).why is Why.BOTH_SIDES  # a wide band decides nothing either


def test_a_direction_needs_three_pairs_and_a_ratio_two():
    assert read_ratio(1.05, 1.02, 1.08, pairs=2).why is Why.TOO_FEW  # two pairs agree by chance half the time
    assert ratio_decided([1.02, 1.04]) and read_ratio(1.03, 1.02, 1.04, pairs=2).why is Why.TOO_FEW  # the stop rule
    assert read_ratio(1.31, 1.31, 1.31, pairs=1).why is Why.NO_SPREAD
    assert read_ratio(float("nan"), 1.0, 1.1).why is Why.NO_SPREAD


def test_pairs_that_never_settled_give_a_direction_but_no_ranking():
    v = read_ratio(1.5, 1.4, 1.6, pairs=3, settled=False)
    assert v.reading is Reading.CONSISTENT and v.ahead == "a" and v.why is Why.UNSETTLED


def test_ranges_apart_are_never_too_close_whatever_the_drift_margin():
    # notebook 03's case: 6.3 vs 4.0 img/s, ranges apart, under a 60 % drift margin: a direction, with its size
    v = read_apart((6.3, 6.1, 6.5), (4.0, 3.9, 4.1), margin=0.6)
    assert v.reading is Reading.CONSISTENT and v.ahead == "a" and v.lead == pytest.approx(6.3 / 4.0 - 1)
    assert read_apart((6.3, 6.1, 6.5), (4.0, 3.9, 4.1), margin=0.45).ranked  # 57 % ahead, past 45 %
    assert read_apart((18.4, 18.2, 18.6), (20.0, 19.0, 21.0), margin=0.10).reading is Reading.CONSISTENT


def test_overlapping_ranges_and_missing_spread_are_too_close():
    v = read_apart((20.0, 19.0, 21.0), (20.5, 20.2, 20.9), margin=0.10)
    assert v.reading is Reading.TOO_CLOSE and v.why is Why.OVERLAP and v.ahead is None
    assert read_apart((20.0, 20.0, 20.0), (5.0, 5.0, 5.0), margin=0.1, spread=(True, False)).why is Why.NO_SPREAD
    v = read_apart((20.0, 19.0, 21.0), (15.0, 14.0, 19.5), margin=0.1, settled=(True, False))
    assert v.reading is Reading.TOO_CLOSE and v.why is Why.UNSETTLED and v.unsettled == ("b",)


def test_lower_is_better_reads_the_lower_latency_as_ahead():
    v = read_apart((50.0, 49.0, 52.0), (60.0, 58.0, 63.0), margin=0.10, higher_is_better=False)
    assert v.ranked and v.ahead == "a" and v.lead == pytest.approx(0.2)
    v = read_apart((50.0, 49.0, 52.0), (60.0, 58.0, 63.0), margin=0.10, settled=(None, False), higher_is_better=False)
    assert v.reading is Reading.CONSISTENT and v.why is Why.UNSETTLED


def test_a_tail_latency_band_from_a_wide_spread_never_goes_below_zero():
    """An open loop past capacity once gave a p99 of 7413 ms a band of -4222–19048 ms: its windows' relative
    spread (3.1) was more than 2, and the band spread it both ways around the value."""
    v, lo, hi = band({"latency_p99_ms": 7413.0, "spread": 3.14, "repeats": 8}, "latency_p99_ms")
    assert (v, lo) == (7413.0, 0.0) and hi > v
