"""The one reader of a lesson's words for a ratio: its boundaries, with the margin always passed in."""

import pytest

from servelab.bench.report.grades import Grade, grade, words


@pytest.mark.parametrize(("ratio", "margin", "expected"), [
    (1.10, 0.10, Grade.FLAT),       # exactly the margin: no change this run can call
    (1.11, 0.10, Grade.GAIN),
    (1 / 1.10, 0.10, Grade.FLAT),   # the same margin the other way (larger ÷ smaller − 1)
    (0.90, 0.10, Grade.LOSS),
    (1.11, 0.20, Grade.FLAT),       # a wider margin (this run's drift) calls the same ratio flat
    (1.0, 0.0, Grade.FLAT),
])
def test_a_ratio_is_flat_within_the_margin_of_one_and_a_gain_or_loss_past_it(ratio, margin, expected):
    assert grade(ratio, margin=margin) is expected


def test_a_range_that_reaches_no_change_is_flat_whatever_its_middle():
    assert grade(1.2, margin=0.1) is Grade.GAIN
    assert grade(1.2, 1.05, 1.3, margin=0.1) is Grade.FLAT
    assert grade(0.8, 0.7, 0.95, margin=0.1) is Grade.FLAT
    assert grade(1.2, 1.15, 1.3, margin=0.1) is Grade.GAIN


@pytest.mark.parametrize(("ratio", "expected"), [
    (1.05, Grade.FLAT), (2.0, Grade.FAR_FROM_TARGET), (7.2, Grade.FAR_FROM_TARGET), (7.3, Grade.CLOSE_TO_TARGET),
    (8.0, Grade.CLOSE_TO_TARGET), (8.8, Grade.CLOSE_TO_TARGET), (8.9, Grade.ABOVE_TARGET), (0.5, Grade.LOSS),
])
def test_against_a_target_a_gain_is_close_far_or_above(ratio, expected):
    # 8 × 1 / 1.1 = 7.27 and 8 × 1.1 = 8.8 bound "close to 8×" at a 10 % margin
    assert grade(ratio, margin=0.1, target=8) is expected


def test_a_targets_range_counts_too():
    assert grade(6.5, 6.0, 7.5, margin=0.1, target=8) is Grade.CLOSE_TO_TARGET
    assert grade(6.5, 6.0, 7.0, margin=0.1, target=8) is Grade.FAR_FROM_TARGET


def test_words_say_the_grade_with_its_target():
    assert words(Grade.FLAT) == "flat" and words(Grade.GAIN) == "a gain"
    assert words(Grade.FAR_FROM_TARGET, target=8) == "far from 8×"
    assert words(Grade.CLOSE_TO_TARGET, target=2.5) == "close to 2.5×"


@pytest.mark.parametrize("bad", [dict(ratio=0.0, margin=0.1), dict(ratio=1.2, margin=-0.1)])
def test_a_ratio_or_margin_that_means_nothing_is_refused(bad):
    with pytest.raises(ValueError):
        grade(**bad)
