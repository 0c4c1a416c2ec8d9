"""The drift probe: the machine's own speed, measured with the real ONNX engine and summarised pairwise."""

import pytest

from servelab.bench.load.drift import DriftProbe, describe, drift, probe_values
from servelab.bench.results.records import Run


def test_drift_is_the_pairwise_difference_nine_pairs_in_ten_stay_within():
    assert drift([]) is None and drift([10.0]) is None
    assert drift([10.0, 10.0, 10.0]) == 0.0
    # pairs of [10, 10, 10, 12]: three differ by 0, three by 2 (of a median 10): the 0.9 quantile is 0.2
    assert drift([10.0, 10.0, 10.0, 12.0]) == pytest.approx(0.2)
    assert "9 of 10 pairs of them differed by less than 20 %" in describe([10.0, 10.0, 10.0, 12.0])
    assert "unknown" in describe([10.0])


def test_probe_measures_the_real_engine_and_writes_a_probe_record(tmp_path, onnx_meta):
    probe = DriftProbe()
    run = Run(run_id="p", root=tmp_path, weights="w")
    rec = probe.record(run, "04_triton_dynamic_batching", seconds=0.5)
    assert rec["kind"] == "probe" and rec["requests"] >= 3 and rec["throughput_img_s"] > 0
    assert rec["note"] == "before 04_triton_dynamic_batching"
    assert rec["latency_p50_ms"] > 0 and rec["measured_s"] >= 0.5
    assert probe_values(Run(run_id="p", root=tmp_path).records) == [rec["throughput_img_s"]]
