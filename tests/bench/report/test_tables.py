"""Tables rendered from records (servelab.bench.report.tables)."""

import pytest

from servelab.bench.report import cost_table


def test_cost_table_units_and_math():
    recs = [{"kind": "load", "experiment": "e", "server": "triton-grpc", "throughput_img_s": 100.0,
             "throughput_min_img_s": 90.0, "throughput_max_img_s": 110.0, "batch": 1, "concurrency": 16},
            {"kind": "derived", "throughput_img_s": None}]
    (row,) = cost_table(recs, price_per_hour=2.0, currency="EUR")
    assert row["cost_EUR_per_1000_img"] == pytest.approx(2.0 / 360.0, rel=1e-4)
    assert row["cost_min_EUR_per_1000_img"] < row["cost_EUR_per_1000_img"] < row["cost_max_EUR_per_1000_img"]
