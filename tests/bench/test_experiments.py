"""Experiment plumbing that needs no server: serialisation costs, target verdicts, cost table."""

import pytest

from servelab.bench.experiments import cost_table, serialisation_costs, service_targets, targets_table
from servelab.bench.records import Run


def test_serialisation_bytes_are_exact_and_formats_differ():
    rows = {r["payload"]: r for r in serialisation_costs(batch=2, repeats=2)}
    assert rows["binary-tensor"]["bytes_per_request"] == 2 * 3 * 224 * 224 * 4
    assert rows["json-lists"]["bytes_per_request"] > 3 * rows["binary-tensor"]["bytes_per_request"]
    assert rows["jpeg"]["bytes_per_request"] < rows["binary-tensor"]["bytes_per_request"] / 5
    assert all(r["serialise_p50_ms"] is not None and r["serialise_p50_ms"] >= 0 for r in rows.values())


def _rec(run, **kw):
    base = dict(kind="load", target="fastapi", backend="fastapi", engine="onnx", batch=1, stable=True,
                params={"load": {"label": "full"}})
    base.update(kw)
    return run.record("service", **base)


def test_service_targets_mark_met_and_not_met_honestly(tmp_path):
    run = Run(run_id="t", root=tmp_path, weights="random-init (seed 0)")
    recs = [
        _rec(run, kind="raw", target="in-process", engine="onnx", batch=16, throughput_img_s=30.0, latency_p50_ms=500.0),
        _rec(run, kind="raw", target="in-process", engine="onnx", batch=1, throughput_img_s=23.0, latency_p50_ms=43.0),
        _rec(run, concurrency=16, throughput_img_s=29.0, latency_p50_ms=550.0),          # 0.967 >= 0.95: met
        _rec(run, concurrency=1, throughput_img_s=20.0, latency_p50_ms=48.5, stable=False),  # +5.5 ms: not met
        _rec(run, kind="raw", target="in-process", engine="torch", batch=16, throughput_img_s=29.0),
        _rec(run, kind="raw", target="in-process", engine="onnx-int8", batch=16, throughput_img_s=76.0,
             cosine_vs_torch_fp32=0.99984),
    ]
    rows = {r["target"]: r for r in targets_table(service_targets(run, recs))}
    assert rows["onnx: served c=16 / raw batch 16 throughput"]["status"] == "met"
    assert rows["onnx: served c=16 / raw batch 16 throughput"]["measured"] == pytest.approx(29 / 30, abs=1e-4)
    assert rows["onnx: served c=1 p50 - raw batch 1 p50 (ms)"]["status"] == "not met (inputs not stable)"
    assert rows["onnx-int8 / torch fp32 throughput (batch 16)"]["status"] == "met"  # 2.62x
    assert rows["onnx-int8 min cosine vs torch fp32"]["status"] == "met"


def test_quick_inputs_are_flagged(tmp_path):
    run = Run(run_id="q", root=tmp_path, weights="w")
    quick = {"load": {"label": "quick"}}
    recs = [_rec(run, kind="raw", target="in-process", batch=16, throughput_img_s=30.0, params=quick),
            _rec(run, concurrency=16, throughput_img_s=10.0, params=quick)]
    (row,) = targets_table(service_targets(run, recs))
    assert row["status"] == "not met (quick run: not a result)"


def test_cost_table_units_and_math():
    recs = [{"kind": "load", "experiment": "e", "target": "triton-grpc", "throughput_img_s": 100.0, "batch": 1,
             "concurrency": 16}, {"kind": "derived", "throughput_img_s": None}]
    (row,) = cost_table(recs, price_per_hour=2.0, currency="EUR")
    assert row["cost_EUR_per_1000_img"] == pytest.approx(2.0 / 360.0, rel=1e-4)
    assert row["price_EUR_per_hour"] == 2.0
