"""The windows every loop shares: sized by the work, repeated until the last few agree (or saying they never
did), counted without building arrays, and errors counted, not hidden."""

import time

import pytest

from servelab.bench.load import LoadOpts, Recorder, closed_loop

from ..conftest import paced

QUICK = LoadOpts(min_requests=5, min_p50s=2, max_windows=3, tolerance=0.5, max_warmup_s=5)


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
