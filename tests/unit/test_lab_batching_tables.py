"""The rows lesson 04 draws from its records and its trace: per-image cost by engine, one traced window, and
perf_analyzer beside servelab's own record of the same point."""

from __future__ import annotations

import pytest

from servelab.lab import batching_tables as tables
from servelab.triton.perf_analyzer import PerfResult
from servelab.triton.trace import RequestSpan


def point(batch, p50, img_s):
    return {"batch": batch, "latency_p50_ms": p50, "throughput_img_s": img_s}


def test_batch_gain_by_engine_splits_per_call_cost_over_the_batch():
    df = tables.batch_gain_by_engine({"torch": [point(1, 100.0, 10.0), point(8, 400.0, 20.0)],
                                      "ort": [point(1, 50.0, 20.0), point(8, 400.0, 20.0)]}, 1, 8)
    torch, ort = df.iloc[0], df.iloc[1]
    assert torch["ms_per_image_batch_1"] == 100 and torch["ms_per_image_batch_8"] == 50
    assert torch["saved_ms_per_image"] == 50 and torch["batch_gain"] == 2
    assert ort["saved_ms_per_image"] == 0 and ort["batch_gain"] == 1
    assert list(df["engine"]) == ["torch", "ort"]


def test_per_image_cost_and_batch_gain_are_one_figure_read_two_ways():
    """A run once said "an image of a batch-8 request cost 0.80 of a single one, so batching could buy at most
    1.25×" beside a gain of 1.41×: the per-image cost came from p50 ÷ batch, the gain from the throughput."""
    df = tables.batch_gain_by_engine({"ort": [point(1, 97.0, 9.16), point(8, 616.0, 12.91)]}, 1, 8)
    row = df.iloc[0]
    assert row["ms_per_image_batch_8"] / row["ms_per_image_batch_1"] == pytest.approx(1 / row["batch_gain"])


def ab(ratio, lo, hi, repeats=4):
    return {"kind": "ab", "ratio": ratio, "ratio_min": lo, "ratio_max": hi, "repeats": repeats}


@pytest.mark.parametrize("pairs, said", [
    (ab(1.41, 1.35, 1.48), "saved part"),             # every pair past the margin, far from 8×
    (ab(1.02, 0.95, 1.09), "cost about its size"),     # pairs on both sides of 1
    (ab(0.80, 0.75, 0.85), "cost more than its size"),
    (ab(7.6, 7.3, 7.9), "Close to proportional"),
])
def test_what_a_batch_bought_is_read_from_its_pairs(pairs, said):
    assert said in tables.batch_gain_cause(pairs, target=8, margin=0.1)


def test_no_cause_is_offered_for_pairs_that_rank_nothing():
    """A smoke run's one window pair read "indistinguishable: no spread" beside "a batch saved part of …"."""
    one_pair = {"kind": "ab", "ratio": 1.32, "repeats": 1}
    assert "does not say" in tables.batch_gain_cause(one_pair, target=2, margin=0.1)
    assert tables.batch_gain_grade(one_pair, target=2, margin=0.1) is tables.Grade.FLAT
    assert "does not say" in tables.batch_gain_cause(ab(1.06, 1.03, 1.08), target=8, margin=0.1)


def test_a_gain_every_pair_shows_is_never_called_a_batch_that_cost_its_size():
    """A lesson once graded 1.41× "flat" against the drift margin of two sweep points measured apart, and said the
    CPU "was already busy at batch 1": the pairs of alternating windows decide, at their own margin."""
    cause = tables.batch_gain_cause(ab(1.41, 1.30, 1.52), target=8, margin=0.1)
    assert "about its size" not in cause and "busy" not in cause


def test_trace_row_groups_requests_by_shared_compute():
    ms = 1_000_000
    spans = [RequestSpan(1, "m", 0, 0, 10 * ms, 11 * ms),  # ran alone, no wait
             RequestSpan(2, "m", 1 * ms, 10 * ms, 30 * ms, 31 * ms),  # these two shared one execution
             RequestSpan(3, "m", 2 * ms, 10 * ms, 30 * ms, 32 * ms)]
    row = tables.trace_row(spans, "own config")
    assert row["requests"] == 3 and row["executions"] == 2
    assert row["batch_sizes"] == "{1: 1, 2: 1}"
    assert row["queue_ms_median"] == pytest.approx(8.0) and row["queue_ms_max"] == pytest.approx(9.0)
    assert row["execution_ms_median"] == pytest.approx(15.0) and row["window_ms"] == pytest.approx(32.0)


def test_tools_side_by_side_puts_the_servers_own_breakdown_beside_perf_analyzer():
    pa = PerfResult(concurrency=8, throughput_img_s=12.0, latency_p50_ms=600.0, latency_p99_ms=900.0,
                    server_queue_ms=400.0, server_compute_ms=150.0, output="")
    ours = {"concurrency": 8, "throughput_img_s": 11.0, "latency_p50_ms": 650.0, "latency_p99_ms": 950.0,
            "server_stats": {"avg_queue_ms": 420.0, "avg_compute_infer_ms": 160.0}}
    df = tables.tools_side_by_side(pa, ours).set_index("concurrency", append=True)
    assert list(df["throughput_img_s"]) == [12.0, 11.0]
    assert list(df["server_queue_ms"]) == [400.0, 420.0] and list(df["server_compute_ms"]) == [150.0, 160.0]
    assert tables.tools_side_by_side(pa, {**ours, "server_stats": None})["server_queue_ms"].isna().iloc[1]


def test_ratio_columns_carry_the_ratio_and_its_pair_range():
    r = {"kind": "ab", "ratio": 1.5, "ratio_min": 1.2, "ratio_max": 1.8}
    assert tables.ratio_columns(r) == {"ratio": 1.5, "pairs_min": 1.2, "pairs_max": 1.8}
    assert tables.ratio_columns(r, "on_div_off") == {"on_div_off": 1.5, "pairs_min": 1.2, "pairs_max": 1.8}


def test_switch_row_puts_the_measured_switch_beside_its_prediction():
    r = {"kind": "ab", "ratio": 1.26, "ratio_min": 1.2, "ratio_max": 1.3}
    row = tables.switch_row("cpu", r, {"server_stats": {"avg_batch": 3.5}}, 1.534, "the batch-size table")
    assert row == {"device": "cpu", "on_div_off": 1.26, "pairs_min": 1.2, "pairs_max": 1.3, "avg_batch_on": 3.5,
                   "predicted": 1.53, "predicted_from": "the batch-size table"}
    assert tables.switch_row("emulated", r, {"server_stats": None}, 2.0, "the profile")["avg_batch_on"] is None


def test_trace_row_names_its_largest_batch():
    ms = 1_000_000
    spans = [RequestSpan(i, "m", 0, 0, 10 * ms, 11 * ms) for i in (1, 2, 3)]
    assert tables.trace_row(spans, "own config")["largest_batch"] == 3


@pytest.mark.parametrize("queue_ms, reading", [(212.0, "less than"), (360.0, "close to"), (700.0, "more than")])
def test_queue_wait_reads_the_rule_against_tritons_own_means(queue_ms, reading):
    """A lesson once printed "(8−1)/3.74 ≈ 1.9 executions" beside a measured wait of 0.67 of one, and compared
    nothing: the rule is N/B − 1 (a request rides with B − 1 others), and the sentence says how the run read it."""
    wait = tables.QueueWait(clients=8, avg_batch=3.74, queue_ms=queue_ms, compute_ms=315.0)
    assert wait.predicted == pytest.approx(8 / 3.74 - 1)
    assert wait.reading == reading
    assert f"{reading} the rule" in wait.sentence() and "1.1 executions" in wait.sentence()


def test_queue_wait_without_batching_is_n_minus_one_executions():
    wait = tables.QueueWait(clients=8, avg_batch=1.0, queue_ms=7 * 90.0, compute_ms=90.0)
    assert wait.predicted == pytest.approx(7) and wait.reading == "close to"
    assert tables.QueueWait(clients=4, avg_batch=4.0, queue_ms=5.0, compute_ms=100.0).reading == "close to"


def test_queue_wait_reads_a_records_triton_statistics():
    rec = {"concurrency": 8, "server_stats": {"avg_batch": 3.74, "avg_queue_ms": 212.0, "avg_compute_infer_ms": 315.0}}
    assert tables.QueueWait.of(rec) == tables.QueueWait(8, 3.74, 212.0, 315.0)
    unread = tables.QueueWait.of({"concurrency": 2, "server_stats": {"avg_queue_ms": None}})
    assert unread.avg_batch == 1.0 and unread.queue_ms != unread.queue_ms  # NaN: the statistics were not read
    assert "does not check it" in unread.sentence() and "nan" not in unread.sentence()
