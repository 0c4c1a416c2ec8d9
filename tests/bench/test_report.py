"""Tables, plots and the cost table from records."""

import csv

from servelab.bench.records import Run, load_records
from servelab.bench.report import write_report


def _run(tmp_path, name, points):
    run = Run(run_id=name, root=tmp_path, weights="random-init (seed 0)")
    for c, thr, p50, spread in points:
        run.record("concurrency-sweep", kind="load", server="fastapi", backend="fastapi", engine="onnx", protocol="http",
                   payload="tensor", batch=1, concurrency=c, throughput_img_s=thr, latency_p50_ms=p50,
                   latency_p95_ms=p50 * 1.5, latency_p99_ms=p50 * 2, requests=100, repeats=3, stable=True,
                   spread=spread, server_stats={"avg_batch": float(c), "batch_histogram": {"<=1": 10, "<=16": 5}})
    return run


def test_report_writes_tables_plots_and_cost(tmp_path):
    run = _run(tmp_path, "R", [(1, 20.0, 50.0, 0.05), (4, 26.0, 150.0, 0.05), (16, 28.0, 560.0, 0.05)])
    for n, thr in ((1, 20.0), (2, 30.0)):
        run.record("instances", kind="load", server="triton-grpc", engine="onnx", concurrency=16, batch=1,
                   throughput_img_s=thr, latency_p50_ms=100.0, latency_p99_ms=200.0, params={"instances": n},
                   server_stats={"avg_queue_ms": 5.0, "avg_compute_input_ms": 1.0, "avg_compute_infer_ms": 30.0,
                           "avg_compute_output_ms": 0.5})
    paths = write_report(run, price_per_hour=3.6)
    names = {p.name for p in paths}
    assert {"concurrency-sweep.csv", "concurrency-sweep.md", "all.csv", "cost.csv", "latency_vs_throughput.png",
            "batch_size_histogram.png", "server_breakdown.png", "scaling_efficiency.png"} <= names
    for p in paths:
        if p.suffix == ".png":
            assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    header = next(csv.reader(open(tmp_path / "R" / "tables" / "concurrency-sweep.csv")))
    assert "throughput_img_s" in header and "latency_p99_ms" in header
    cost = list(csv.DictReader(open(tmp_path / "R" / "tables" / "cost.csv")))
    row = next(r for r in cost if r["concurrency"] == "1" and r["server"] == "fastapi")
    assert abs(float(row["cost_USD_per_1000_img"]) - 3.6 / (20.0 * 3.6)) < 1e-6
    assert len(load_records(tmp_path / "R")) == 5
