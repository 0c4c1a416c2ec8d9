"""The interleaved A/B: alternating windows cancel a drift that a sequential comparison does not, stop once the
verdict is known, warm a reconfigured side up again; and `ab(prepare=…)` with `config_switch` interleaves two
configurations of one Triton model on a real tritonserver (the tiny model: 20 ms per execution whatever the batch,
so batching on vs off is a large, certain difference)."""

from __future__ import annotations

import time

import pytest

from servelab.bench.experiments import Side, ab
from servelab.bench.experiments.interleaved import interleaved
from servelab.bench.load import LoadOpts, closed_loop
from servelab.bench.report import Reading, read_ratio
from servelab.bench.results.records import Run
from servelab.bench.servers import TritonServed
from servelab.triton.control import config_dict, config_switch, get_config

from ..conftest import TINY, paced

QUICK = LoadOpts(min_requests=5, min_p50s=2, max_windows=3, tolerance=0.5, max_warmup_s=5)

@pytest.mark.triton
def test_batching_on_and_off_interleave_on_one_model_and_the_config_comes_back(tiny_triton, tiny_factory, tmp_path):
    on = config_dict(get_config(tiny_triton.http_url, TINY))
    off = {k: v for k, v in on.items() if k != "dynamic_batching"}
    srv = TritonServed(server="triton-grpc", engine="tiny", url=tiny_triton.http_url, protocol="grpc", http_url=tiny_triton.http_url,
                       model=TINY, jpeg_model=TINY)
    srv.worker_factory = lambda payload, batch: tiny_factory()  # the tiny model's own inputs
    loaded: list[int] = []
    seen: list[tuple[int, bool]] = []

    with config_switch(tiny_triton.http_url, TINY, [on, off]) as use:
        def prepare(side: int) -> bool:
            changed = use(side)
            if changed:
                loaded.append(side)
            seen.append((side, "dynamic_batching" in get_config(tiny_triton.http_url, TINY)))
            return changed

        opts = LoadOpts(min_requests=16, min_p50s=2, max_windows=3, tolerance=0.5, max_warmup_s=5)
        a, b, r = ab(Run("t", root=tmp_path, weights="none"), "t-batching", Side("batching on", srv, concurrency=8),
                     Side("batching off", srv, concurrency=8), opts=opts, prepare=prepare)

    # every window of each side ran on that side's config; A and B alternated (ABBA), so the model was
    # reloaded at most once per window, not per request
    assert seen and all(batching == (side == 0) for side, batching in seen)
    assert {0, 1} <= set(loaded) and len(loaded) < len(seen)  # reloaded on a change of side only
    assert loaded[0] == 1  # the model's own config (A) counted as loaded: the first reload was B's
    assert [side for side, _ in seen[:3]] == [0, 0, 1]  # B's config loaded for B's first window, not before A's
    assert a["server_stats"]["avg_batch"] > 1.5          # dynamic batching gathered the 8 clients' requests
    assert b["server_stats"]["avg_batch"] == pytest.approx(1.0)  # without it, one request per execution
    assert r["kind"] == "ab" and r["ratio"] > 2.0        # 20 ms per execution: batching multiplies throughput
    assert r["protocol"] == "grpc" and r["payload"] == "tensor"
    assert a["params"]["side"] == "a" and b["params"]["side"] == "b"
    assert "dynamic_batching" in get_config(tiny_triton.http_url, TINY)  # restored on leaving the block


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
