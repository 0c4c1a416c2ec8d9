"""Notebook 09's choices come from this run's records: a choice leaves the simple default only where its comparison
ranked the other side, each names the record it rests on, and the ratio of two sides measured in rounds is read
like any interleaved A/B."""

from __future__ import annotations

import pytest

from servelab.bench.report import ratio_reading
from servelab.bench.results.records import Run
from servelab.lab import capstone, rounds


def ab(experiment, a, b, ratio, lo, hi, pairs=3, **fields):
    return {"kind": "ab", "experiment": experiment, "a": a, "b": b, "ratio": ratio, "ratio_min": lo, "ratio_max": hi,
            "repeats": pairs, "stable": True, **fields}


def side(experiment, which, **fields):
    return {"kind": "load", "experiment": experiment, "params": {"side": which}, **fields}


def sweep_point(batch, value, lo, hi):
    return {"kind": "load", "experiment": "04-triton-batch", "batch": batch, "throughput_img_s": value,
            "throughput_min_img_s": lo, "throughput_max_img_s": hi, "stable": True}


RANKED = [
    ab("06a-servelab-vs-triton", "fastapi", "triton-http", 0.7, 0.65, 0.75, concurrency=8),
    ab("07-protocol-batch", "grpc", "http", 1.5, 1.4, 1.6, batch=8),
    ab("07-protocol-batch", "grpc", "http", 0.8, 0.7, 0.9, batch=1),
    sweep_point(1, 20.0, 19.5, 20.5), sweep_point(8, 30.0, 29.5, 30.5),
    ab("04-triton-concurrency-ratio", "concurrency 8", "concurrency 1", 1.4, 1.3, 1.5),
    side("04-triton-concurrency-ratio", "a", concurrency=8),
    ab("05a-deploy-triton", "onnx-int8 Triton", "onnx Triton", 1.6, 1.5, 1.7),
    side("05a-deploy-triton", "a", engine="onnx-int8"),
]


def test_every_ranked_comparison_moves_its_choice_and_says_which_record():
    c = capstone.choose(RANKED)
    assert (c.server.value, c.protocol.value, c.batch.value, c.workers.value, c.engine.value) == \
        ("triton", "grpc", 8, 8, "onnx-int8")
    assert c.backend == "triton-grpc"
    assert c.server.because.startswith("06a") and c.protocol.because.startswith("07, batches of 8")
    assert "04" in c.batch.because and "05a" in c.engine.because


def test_comparisons_too_close_to_call_keep_the_simple_defaults():
    close = [dict(r, ratio=1.01, ratio_min=0.97, ratio_max=1.05) if r["kind"] == "ab" else r for r in RANKED]
    close = [dict(r, throughput_img_s=20.2, throughput_min_img_s=19.0, throughput_max_img_s=21.0)
             if r["experiment"] == "04-triton-batch" else r for r in close]
    c = capstone.choose(close)
    assert (c.server.value, c.protocol.value, c.batch.value, c.workers.value, c.engine.value) == \
        ("fastapi", "http", 1, 1, "onnx")
    assert "neither ranked ahead" in c.server.because and "not ranked ahead" in c.batch.because


def test_without_records_each_choice_says_what_is_missing():
    c = capstone.choose([])
    assert c.describe() == "fastapi, onnx, batches of 16, 1 request(s) in flight"
    assert all("no " in row["because"] or "HTTP" in row["because"] or "05a deployed no" in row["because"]
               for row in c.rows())


def test_requests_in_flight_stay_within_the_service_queue():
    records = [r for r in RANKED if r["experiment"] != "06a-servelab-vs-triton"]  # FastAPI: no clear Triton lead
    c = capstone.choose(records, max_queue=32)
    assert c.server.value == "fastapi" and c.batch.value == 8 and c.workers.value == 4
    assert "queue of 32" in c.workers.because


def test_rounds_ratio_is_read_like_an_interleaved_ab(tmp_path):
    run = Run(run_id="t", root=tmp_path)
    rec = rounds.ratio_record(run, "t-rounds", "x", "y", [30.0, 33.0, 31.0], [20.0, 21.0, 20.5])
    assert rec["kind"] == "ab" and rec["repeats"] == 3 and rec["ratio_min"] == pytest.approx(1.5)
    assert ratio_reading(rec).ranked and ratio_reading(rec).ahead == "a"
    one = rounds.ratio_record(run, "t-rounds", "x", "y", [30.0], [20.0])
    assert not ratio_reading(one).ranked  # one round shows no spread
    assert rounds.order(["a", "b", "c"], 1) == ["c", "b", "a"]
    moving = rounds.ratio_record(run, "t-rounds", "x", "y", [30.0, 40.0, 41.0], [10.0, 10.0, 10.0])
    assert moving["stable"] and ratio_reading(moving).ranked  # the last two rounds agree, as interleaved windows must
    assert not rounds.ratio_record(run, "t-rounds", "x", "y", [30.0, 40.0], [10.0, 10.0])["stable"]
