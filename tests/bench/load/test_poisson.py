"""The open loop: a seeded Poisson schedule; against a real tritonserver it holds a rate the server can hold and
reports backlog (not a fake rate) at one it cannot; drops are counted."""

import time

import numpy as np
import pytest

from servelab.bench.load import open_loop, poisson_schedule
from servelab.bench.results.records import make_record, validate_record

from ..conftest import TINY


def test_poisson_schedule_rate_and_seed():
    a = poisson_schedule(200.0, 50.0, seed=1)
    assert len(a) == pytest.approx(200 * 50, rel=0.05)
    gaps = np.diff(a)
    assert gaps.mean() == pytest.approx(1 / 200, rel=0.05)
    assert gaps.std() == pytest.approx(1 / 200, rel=0.08)  # exponential: std == mean
    assert np.array_equal(a, poisson_schedule(200.0, 50.0, seed=1))


@pytest.mark.triton
def test_open_loop_holds_a_holdable_rate(tiny_triton, tiny_factory):
    from servelab.triton.server_stats import stats_delta

    rate, duration = 40.0, 3.0
    with stats_delta(tiny_triton.http_url, TINY) as d:
        res = open_loop(tiny_factory(), rate, duration_s=duration, warmup_s=0.5, max_workers=8, seed=3,
                        progress=False)
        d.expected_requests = res.ok_total
    s = res.summary()
    assert d.result.requests == res.sent_total == res.ok_total  # exact, open loop too
    assert s["rate_held"] is True and s["backlog"] <= 2 and s["dropped"] == 0
    expected = (poisson_schedule(rate, 3.5, seed=3) >= 0.5).sum()
    assert s["offered"] == expected  # the seeded schedule is what was offered
    assert s["throughput_img_s"] == pytest.approx(s["offered_rate_rps"], rel=0.1)
    assert s["throughput_img_s"] == pytest.approx(rate, rel=0.3)  # Poisson count over 3 s: ±3σ ≈ 27 %


@pytest.mark.triton
def test_open_loop_repeats_windows_until_they_agree_or_the_cap(tiny_triton, tiny_factory):
    # a loose tolerance: the first three windows agree, so no more are measured
    settled = open_loop(tiny_factory(), 40.0, duration_s=1.5, max_duration_s=6.0, window_s=0.5, warmup_s=0.3,
                        max_workers=8, seed=1, tolerance=0.9)
    assert settled.stable and settled.windows_used == 3 and settled.measured_s == pytest.approx(1.5)
    # a tolerance nothing meets: windows go on to the cap, and the point says it never settled
    capped = open_loop(tiny_factory(), 40.0, duration_s=1.0, max_duration_s=2.0, window_s=0.5, warmup_s=0.3,
                       max_workers=8, seed=1, tolerance=0.0)
    assert not capped.stable and capped.windows_used == 4 and capped.measured_s == pytest.approx(2.0)
    assert capped.summary()["offered"] == (poisson_schedule(40.0, 2.3, seed=1) >= 0.3).sum()
    assert len(capped.summary()["backlog_by_window"]) == 4


@pytest.mark.triton
def test_open_loop_reports_backlog_at_an_impossible_rate(tiny_triton, tiny_factory):
    # 4 workers, ≥ 20 ms per execution: at most ~200 req/s can complete; 2,000/s is offered
    rate = 2000.0
    res = open_loop(tiny_factory(), rate, duration_s=1.5, warmup_s=0.3, max_workers=4, seed=5, progress=False)
    s = res.summary()
    assert s["rate_held"] is False
    assert s["backlog"] > 0.5 * s["offered"]
    assert s["late_starts"] > 0
    assert s["throughput_img_s"] < 0.5 * rate  # what completed, not what was offered
    assert s["backlog_by_window"] == sorted(s["backlog_by_window"])  # the backlog grows
    rec = make_record("rate-sweep", "t", server="triton-grpc", rate_rps=rate, **s)
    validate_record(rec)


def test_open_loop_drops_are_counted():
    def factory(i):
        def work():
            time.sleep(0.05)
            return 1
        return work

    res = open_loop(factory, 500.0, duration_s=1.0, warmup_s=0.2, max_workers=2, seed=2, drop_after_s=0.02,
                    progress=False)
    s = res.summary()
    assert s["dropped"] > 0 and s["rate_held"] is False
    assert s["throughput_img_s"] < 100  # two workers at 50 ms cannot do more than ~40/s
