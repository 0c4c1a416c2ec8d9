"""The admission rule on its own: the count limit, the time bound, and the count always admitted while nothing is
refused. The clock is a plain number the test moves, so the Retry-After window is exact."""

from __future__ import annotations

import pytest

from servelab.service.admission import Admission


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def gate(**kw) -> tuple[Admission, Clock]:
    clock = Clock()
    g = Admission(kw.pop("limit", 64), clock=clock, **kw)
    g.record(10, 1.0)  # the engine does 10 images/s: each request in flight is 0.1 s of wait
    return g, clock


def fill(g: Admission, n: int) -> list[bool]:
    out = []
    for _ in range(n):
        assert g.refusal() is None
        out.append(g.enter())
    return out


def test_the_time_bound_refuses_once_the_expected_wait_passes_the_budget():
    g, _ = gate(max_wait_s=0.5)
    assert fill(g, 6) == [True] * 6  # 0 .. 0.5 s ahead: admitted, and the budget binds each
    assert "wait budget" in g.refusal()


def test_the_count_always_admitted_takes_requests_whatever_their_wait():
    g, _ = gate(max_wait_s=0.5, always_admit=20)
    assert fill(g, 20) == [False] * 20  # up to 1.9 s ahead, four times the budget: the budget binds none of them
    assert "wait budget" in g.refusal()  # the 21st is the time bound's to admit


def test_a_refusal_leaves_only_the_time_bound_until_its_retry_after_has_passed():
    g, clock = gate(max_wait_s=0.5, always_admit=20)
    fill(g, 20)
    retry_after = g.refused()
    assert retry_after == 2  # 2.0 s of work in flight, in whole seconds
    for _ in range(12):
        g.leave()
    assert g.in_flight == 8 and "wait budget" in g.refusal()  # 0.8 s ahead: within the count, but refusing
    clock.now += retry_after - 0.01
    assert g.refusal() is not None
    clock.now += 0.02
    assert g.refusal() is None and g.enter() is False  # nobody refused for its whole Retry-After: the count again


def test_the_limit_refuses_even_within_the_count():
    g, _ = gate(limit=3, max_wait_s=0.5, always_admit=20)
    fill(g, 3)
    assert "limit is 3" in g.refusal()


def test_without_a_budget_only_the_limit_refuses_and_no_wait_is_bound():
    g, _ = gate(limit=5)
    assert fill(g, 5) == [False] * 5
    assert "limit is 5" in g.refusal()


def test_before_any_measurement_the_time_bound_admits():
    g = Admission(64, max_wait_s=0.5)
    assert g.expected_wait_s() is None and g.refusal() is None and g.drain_s() == 1.0


@pytest.mark.parametrize("kw", [dict(limit=-1), dict(max_wait_s=-1), dict(always_admit=-1)])
def test_negative_settings_are_refused(kw):
    with pytest.raises(ValueError):
        Admission(kw.pop("limit", 1), **kw)
