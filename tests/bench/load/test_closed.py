"""Load generators: windows sized by the work, interleaved A/B cancelling drift, and, against real servers,
counts equal to the server's own counters exactly; the open loop holds a rate the server can hold while
reporting backlog (not a fake rate) at one it cannot."""

import threading
import time

import numpy as np
import pytest

from servelab.bench.experiments.interleaved import interleaved
from servelab.bench.load import LoadOpts, Recorder, client_factory, closed_loop, open_loop, poisson_schedule
from servelab.bench.report import Reading, read_ratio
from servelab.bench.results.records import make_record, validate_record

from ..conftest import TINY

QUICK = LoadOpts(min_requests=5, min_p50s=2, max_windows=3, tolerance=0.5, max_warmup_s=5)


def paced(cost):
    """A work factory whose requests each take `cost()` seconds, paced: a request ends one `cost` after the
    worker's previous one was due, so a late wake-up on a busy machine (several ms have been seen in CI) is
    made up by the next request instead of adding to every one; after a pause (the other side's window in
    an A/B) the schedule restarts from now."""
    def factory(i):
        due = 0.0

        def work():
            nonlocal due
            now, step = time.perf_counter(), cost()
            due = (due if now - due < step else now) + step
            time.sleep(max(0.0, due - time.perf_counter()))
            return 1
        return work
    return factory


def test_closed_loop_counts_are_exact_for_a_plain_callable():
    calls = []
    lock = threading.Lock()

    def factory(i):
        def work():
            time.sleep(0.002)
            with lock:
                calls.append(i)
            return 2
        return work

    res = closed_loop(factory, 3, QUICK)
    assert res.sent_total == res.ok_total == len(calls)
    assert res.images_total == 2 * len(calls)
    assert set(calls) == {0, 1, 2}
    assert res.errors == 0 and res.requests > 0 and res.windows_used >= 1
    assert res.images == 2 * res.requests


def test_windows_are_sized_by_the_work_and_repeat_until_settled():
    """Each window holds >= min_requests completions and lasts >= min_p50s x p50; a steady load settles in 3."""
    opts = LoadOpts(min_requests=12, min_p50s=10, max_windows=6, tolerance=0.15)
    res = closed_loop(paced(lambda: 0.02), 2, opts)
    assert res.stable and res.windows_used == 3 == len(res.windows)
    for w in res.windows:
        assert w["requests"] >= 12
        duration_s = w["requests"] / w["throughput_img_s"]  # one image per request
        assert duration_s >= 0.9 * 10 * w["latency_p50_ms"] / 1000  # >= 10 p50s long, as measured
    s = res.summary()
    assert s["throughput_min_img_s"] <= s["throughput_img_s"] <= s["throughput_max_img_s"]
    assert s["throughput_img_s"] == pytest.approx(2 / 0.02, rel=0.2)
    assert s["warmup_measured_s"] >= 0.02  # never shorter than one request


def test_a_load_that_never_settles_says_so():
    n = iter(range(10**9))

    def factory(i):
        def work():
            time.sleep(0.004 * (1 + next(n) / 3))  # slower with every request: no three windows agree
            return 1
        return work

    res = closed_loop(factory, 1, LoadOpts(min_requests=5, min_p50s=1, max_windows=4, tolerance=0.02))
    assert res.stable is False and res.windows_used == 4 == len(res.windows)
    assert res.summary()["stable"] is False


def test_interleaved_ab_cancels_a_drift_that_a_sequential_comparison_does_not():
    """Both sides slow down over time (a shared machine getting busier); B does twice A's work. Interleaved
    windows give A/B throughput = 2 within a few percent; A measured first and B after is far off."""
    t0 = time.perf_counter()

    def slowdown():
        return 1 + 1.0 * (time.perf_counter() - t0)  # x1 at start, x2 after a second

    def make(cost):
        return paced(lambda: cost * slowdown())

    opts = LoadOpts(min_requests=4, min_p50s=1, max_windows=6, tolerance=0.1, max_warmup_s=2, stop_when_decided=False)
    ab = interleaved(make(0.010), make(0.020), 1, opts)
    assert ab.pairs >= 3 and ab.ratio_min <= ab.ratio_max and ab.settled_by in ("agreement", None)
    assert ab.ratio == pytest.approx(2.0, rel=0.12) and ab.ratio_min <= ab.ratio <= ab.ratio_max
    assert ab.a.windows_used == ab.b.windows_used == ab.pairs
    t0 = time.perf_counter()
    seq_a = closed_loop(make(0.010), 1, LoadOpts(min_requests=15, min_p50s=1, max_windows=3, tolerance=0.9))
    seq_b = closed_loop(make(0.020), 1, LoadOpts(min_requests=15, min_p50s=1, max_windows=3, tolerance=0.9))
    assert seq_a.throughput_img_s / seq_b.throughput_img_s > 2.4  # drift shows up as a wrong ratio


def test_an_interleaved_ratio_stops_once_its_verdict_is_known_and_not_while_it_sits_on_the_margin():
    """Far apart (2×) or alike (1×): two pairs (ABBA) give the verdict, so no third pair is measured. At 1.075×,
    inside the 10 % ranking margin but not well inside it, two pairs do not decide it: more pairs, until they
    agree."""
    opts = LoadOpts(min_requests=12, min_p50s=1, max_windows=6, tolerance=0.1, max_warmup_s=2)
    far = interleaved(paced(lambda: 0.010), paced(lambda: 0.020), 1, opts)
    assert (far.pairs, far.settled_by, far.stable) == (2, "verdict", True)
    assert far.ratio == pytest.approx(2.0, rel=0.12)
    alike = interleaved(paced(lambda: 0.015), paced(lambda: 0.015), 1, opts)
    assert (alike.pairs, alike.settled_by) == (2, "verdict") and 0.95 <= alike.ratio_min <= alike.ratio_max <= 1.05
    near = interleaved(paced(lambda: 0.0150), paced(lambda: 0.016125), 1, opts)
    assert near.pairs >= 3 and near.settled_by != "verdict"
    assert near.ratio == pytest.approx(1.075, rel=0.03)


def test_two_agreeing_pairs_that_show_only_a_direction_are_measured_a_third_time():
    """Two windows per point (the default profile): at 1.075x two pairs agree, but two pairs on one side below the
    margin read as too few to show a direction; a third pair is measured, and the ratio reads as a direction."""
    opts = LoadOpts(min_requests=12, min_p50s=1, max_windows=6, tolerance=0.1, max_warmup_s=2, stable_windows=2)
    near = interleaved(paced(lambda: 0.0150), paced(lambda: 0.016125), 1, opts)
    assert near.pairs >= 3 and near.settled_by == "agreement"
    verdict = read_ratio(near.ratio, near.ratio_min, near.ratio_max, pairs=near.pairs, settled=near.stable)
    assert verdict.reading is Reading.CONSISTENT and verdict.ahead == "a"
    far = interleaved(paced(lambda: 0.010), paced(lambda: 0.020), 1, opts)
    assert far.pairs == 2  # clear of the margin: two pairs decide it, as before


def test_max_pairs_caps_an_interleaved_comparison_and_one_pair_says_it_never_settled():
    """A smoke run's single pair: A then B once, a ratio from that pair, and no claim that it settled."""
    sides = []

    def on_window(side: int, phase: str) -> None:
        if phase == "start":
            sides.append(side)

    opts = LoadOpts(min_requests=5, min_p50s=1, max_windows=4, max_pairs=1, tolerance=0.5, max_warmup_s=2)
    one = interleaved(paced(lambda: 0.010), paced(lambda: 0.020), 1, opts, on_window=on_window)
    assert sides == [0, 1] and one.pairs == 1 and not one.stable
    assert one.ratio_min == one.ratio_max == pytest.approx(2.0, rel=0.2)
    assert one.ratio == pytest.approx(one.ratio_min, rel=1e-12)  # the geometric mean of one pair (exp of its log)


def test_a_side_reconfigured_before_its_window_warms_up_again():
    # side A's "server" is reconfigured before each of its windows and answers its next 5 requests slowly (a
    # reloaded model's first runs); when on_window says so, those fall in a warm-up, not in A's window
    cold = [0]

    def slow_after_reload(i):
        def work():
            time.sleep(0.05 if cold[0] > 0 else 0.01)
            cold[0] = max(0, cold[0] - 1)
            return 1
        return work

    def fast(i):
        def work():
            time.sleep(0.01)
            return 1
        return work

    def on_window(side: int, phase: str) -> bool:
        if side == 0 and phase == "start":
            cold[0] = 5
            return True
        return False

    opts = LoadOpts(min_requests=20, min_p50s=1, max_windows=3, tolerance=0.9, max_warmup_s=5)
    ab = interleaved(slow_after_reload, fast, 1, opts, on_window=on_window)
    # five 50 ms answers inside a 20-request window of 10 ms ones would pull A to about 0.5 of B
    assert ab.ratio_min > 0.75


def test_where_each_side_is_a_reconfiguration_b_warms_up_before_its_own_first_window_only():
    # warming B before A's first window would load B's configuration only to load A's again for that window
    calls = []

    def on_window(side: int, phase: str) -> bool:
        calls.append((side, phase))
        return phase == "start"  # every window needs its side's configuration loaded

    ab = interleaved(paced(lambda: 0.01), paced(lambda: 0.01), 1, QUICK, on_window=on_window, reconfigures=True)
    assert calls[:3] == [(0, "warm-up"), (0, "start"), (0, "end")] and (1, "warm-up") not in calls
    assert ab.b.warmup_s > 0 and ab.ratio == pytest.approx(1.0, rel=0.5)
    calls.clear()
    interleaved(paced(lambda: 0.01), paced(lambda: 0.01), 1, QUICK, on_window=on_window)
    assert calls[:2] == [(1, "warm-up"), (0, "warm-up")]  # two servers: both warm up before the windows


def test_recorder_counts_without_building_arrays():
    rec = Recorder(2)
    marks = rec.marks()
    rec.add(0, 1.0, 1.0, 2.0, 3, True)
    rec.add(1, 1.5, 1.5, 2.5, 1, False, RuntimeError("x"))
    assert rec.completed(marks) == 2 and rec.workers_done_since(marks) == 2 and rec.last_end() == 2.5
    arr = rec.since(marks)
    assert arr.shape == (2, 5) and arr[:, 4].tolist() == [1, 0] and rec.errors == ["RuntimeError: x"]


def test_errors_are_counted_not_hidden():
    def factory(i):
        n = iter(range(10**9))

        def work():
            if next(n) % 3 == 0:
                raise RuntimeError("boom")
            time.sleep(0.001)
            return 1
        return work

    res = closed_loop(factory, 2, QUICK)
    assert res.errors > 0  # inside the measured windows
    assert res.sent_total - res.ok_total >= res.errors  # and in total, warm-up included
    assert any("boom" in e for e in res.error_examples)
    assert res.summary()["errors"] == res.errors


def test_poisson_schedule_rate_and_seed():
    a = poisson_schedule(200.0, 50.0, seed=1)
    assert len(a) == pytest.approx(200 * 50, rel=0.05)
    gaps = np.diff(a)
    assert gaps.mean() == pytest.approx(1 / 200, rel=0.05)
    assert gaps.std() == pytest.approx(1 / 200, rel=0.08)  # exponential: std == mean
    assert np.array_equal(a, poisson_schedule(200.0, 50.0, seed=1))


@pytest.mark.triton
@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_closed_loop_counts_equal_triton_stats_exactly(tiny_triton, tiny_factory, protocol):
    from servelab.triton.server_stats import stats_delta

    with stats_delta(tiny_triton.http_url, TINY) as d:
        res = closed_loop(tiny_factory(protocol), 4, QUICK)
        d.expected_requests = res.ok_total
    s = d.result.summary()
    assert res.errors == 0 and res.sent_total == res.ok_total
    assert s["requests"] == res.ok_total  # every request the generator sent, warm-up included
    assert s["inferences"] == res.images_total
    assert s["failures"] == 0
    assert res.requests <= res.ok_total  # the measured windows are a subset


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


def test_closed_loop_counts_equal_service_metrics(service):
    """Same exactness against the FastAPI service's own Prometheus counters (real model, real uvicorn)."""
    from servelab.bench.load.inputs import sample_tensor
    from servelab.bench.servers import service_delta, service_metrics
    from servelab.client import InferenceClient

    before = service_metrics(service.url)
    res = closed_loop(
        client_factory(lambda: InferenceClient(mode="remote", backend="fastapi", url=service.url, payload="tensor"),
                       tensor=sample_tensor(1)),
        2, LoadOpts.smoke())
    d = service_delta(before, service_metrics(service.url))
    assert res.errors == 0
    assert d["requests"].get("/embed/tensor 200") == res.ok_total == res.sent_total
    assert d["images"] == res.images_total
    assert sum(d["batch_histogram"].values()) == d["executions"] >= 1


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
