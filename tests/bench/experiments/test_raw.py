"""The in-process experiments (servelab.bench.experiments.raw): the engines alone, cold starts, ONNX Runtime's op
profile and the serialisation costs, with tiny parameters (functional, not results)."""


from servelab.bench import experiments as ex
from servelab.bench.load import LoadOpts

SMOKE = LoadOpts.smoke(max_windows=2)


def _ok(rec):
    assert rec["errors"] == 0 and rec["requests"] > 0 and rec["quick"] is True, rec.get("error_examples")
    assert rec["throughput_min_img_s"] <= rec["throughput_img_s"] <= rec["throughput_max_img_s"]


def test_raw_engines_cold_start_and_profile(run, onnx_meta):
    (raw,) = ex.raw_engines(run, engines=("onnx",), batches=(1,), opts=SMOKE)
    _ok(raw)
    (cold,) = ex.cold_start(run, servers=("fastapi",), repeats=2)
    assert cold["kind"] == "cold-start" and cold["repeats"] == 2 and cold["first_request_ms"] > 0
    assert 0 < cold["start_to_ready_min_s"] <= cold["start_to_ready_s"] <= cold["start_to_ready_max_s"]
    assert cold["latency_p50_min_ms"] <= cold["latency_p50_ms"] <= cold["latency_p50_max_ms"]
    (prof,) = ex.ort_profile(run, batch=1, iterations=1)
    assert prof["op_time_share"] and abs(sum(prof["op_time_share"].values()) - 1) < 0.01


def test_serialisation_bytes_are_exact_and_formats_differ():
    rows = {r["payload"]: r for r in ex.serialisation_costs(batch=2, repeats=2)}
    assert rows["binary-tensor"]["bytes_per_request"] == 2 * 3 * 224 * 224 * 4
    assert rows["json-lists"]["bytes_per_request"] > 3 * rows["binary-tensor"]["bytes_per_request"]
    assert rows["jpeg"]["bytes_per_request"] < rows["binary-tensor"]["bytes_per_request"] / 5
    assert all(r["serialise_p50_ms"] is not None and r["serialise_p50_ms"] >= 0 for r in rows.values())


def test_serialisation_repeats_stop_at_their_time_budget_but_never_below_three():
    spent = ex.serialisation_costs(batch=1, repeats=6, budget_s=0.0)
    assert {r["repeats"] for r in spent} == {ex.MIN_REPEATS}
    roomy = ex.serialisation_costs(batch=1, repeats=4, budget_s=1e9)
    assert {r["repeats"] for r in roomy} == {4}
