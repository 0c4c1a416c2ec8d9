"""Every sweep and interleaved experiment against real servers with tiny parameters (LoadOpts.smoke(): functional,
not results)."""

import pytest

from servelab.bench import experiments as ex
from servelab.bench.load import LoadOpts
from servelab.bench.report import goals_table, ratio_sentence
from servelab.bench.results.goals import scaling_efficiency
from servelab.bench.results.records import load_records
from servelab.bench.servers import served

SMOKE = LoadOpts.smoke(max_windows=2)  # one ABBA block per A/B: these tests check that each experiment runs


def _ok(rec):
    assert rec["errors"] == 0 and rec["requests"] > 0 and rec["quick"] is True, rec.get("error_examples")
    assert rec["throughput_min_img_s"] <= rec["throughput_img_s"] <= rec["throughput_max_img_s"]
    assert rec["stable"] in (True, False)


def _ab_ok(recs, label_a, label_b):
    a, b, r = recs
    _ok(a), _ok(b)
    assert r["kind"] == "ab" and (r["a"], r["b"]) == (label_a, label_b)
    assert r["ratio_min"] <= r["ratio"] <= r["ratio_max"]  # the pairs' geometric mean
    assert r["ratio_min"] <= r["ratio_max"] and r["repeats"] == a["windows_used"] == b["windows_used"] >= 2
    assert r["settled_by"] in ("agreement", "verdict", None) and (r["settled_by"] is None) is (r["stable"] is False)


def test_sweeps_count_what_the_service_counted(run, bench_service):
    recs = ex.batch_sweep(run, bench_service, batches=(1, 2), opts=SMOKE)
    recs += ex.concurrency_sweep(run, bench_service, concurrencies=(2,), opts=SMOKE)
    assert [(r["batch"], r["concurrency"]) for r in recs] == [(1, 1), (2, 1), (1, 2)]
    for r in recs:
        _ok(r)
        assert r["server_stats"]["requests"]["/embed/tensor 200"] == r["sent_total"]  # warm-up and windows, exactly
        assert r["server_stats"]["images"] == r["sent_total"] * r["batch"]


def test_a_sweep_takes_the_points_an_interleaved_comparison_measured_instead_of_measuring_them_again(run, bench_service):
    """The sweep's end points are the two sides of the A/B (batch 2 vs batch 1 on one service): only the point
    between them is measured, and the records file holds each point once."""
    pair = ex.ab(run, "ends", ex.Side("batch 4", bench_service, batch=4), ex.Side("batch 1", bench_service), opts=SMOKE)
    recs = ex.batch_sweep(run, bench_service, batches=(1, 2, 4), opts=SMOKE, experiment="sweep", measured=pair)
    assert recs[0] is pair[1] and recs[2] is pair[0] and recs[1]["experiment"] == "sweep"
    assert [r["batch"] for r in recs] == [1, 2, 4]
    written = [r for r in load_records(run.dir) if r["kind"] == "load"]
    assert sorted((r["experiment"], r["batch"]) for r in written) == [("ends", 1), ("ends", 4), ("sweep", 2)]
    # another payload, or another concurrency, is another point: measured
    assert ex.already_measured(pair, bench_service, payload="jpeg", batch=4) is None
    assert ex.already_measured(pair, bench_service, batch=4, concurrency=2) is None


def test_served_vs_raw_is_interleaved(run, bench_service):
    with served("in-process", engine=bench_service.engine) as raw:
        recs = ex.served_vs_raw(run, bench_service, raw, concurrency=2, raw_batch=2, opts=SMOKE)
    _ab_ok(recs, "fastapi c=2", "raw batch 2")
    assert recs[1]["kind"] == "raw" and recs[1]["batch"] == 2
    assert "indistinguishable" in ratio_sentence(recs[2]) or "ahead" in ratio_sentence(recs[2])


def test_service_payload_jpeg_vs_tensor_and_rate_sweep(run, bench_service):
    _ab_ok(ex.payload(run, bench_service, concurrency=1, opts=SMOKE), "fastapi jpeg", "fastapi tensor")
    (rec,) = ex.rate_sweep(run, bench_service, rates=(4,), duration_s=1.0, warmup_s=0.2, max_workers=4, quick=True)
    assert rec["rate_rps"] == 4.0 and rec["offered"] >= 0 and rec["errors"] == 0


@pytest.mark.triton
def test_triton_experiments_reconfigure_and_restore(run, bench_triton):
    before = (bench_triton.instances, bench_triton.max_queue_delay_us)
    grid = ex.queue_delay_grid(run, bench_triton, delays_us=(0, 3000), concurrencies=(2,), opts=SMOKE)
    assert [r["params"]["max_queue_delay_us"] for r in grid] == [0, 3000]
    scale = ex.instance_scaling(run, bench_triton, counts=(1, 2), concurrencies=(2,), opts=SMOKE)
    assert [r["params"]["instances"] for r in scale] == [1, 2]
    for r in grid + scale:
        _ok(r)
        assert r["server_stats"]["requests_ok"] == r["sent_total"]
    assert (bench_triton.read_state().instances, bench_triton.max_queue_delay_us) == before  # restored
    (eff,) = scaling_efficiency(run, scale)
    assert eff["value"] == pytest.approx(scale[1]["throughput_img_s"] / (2 * scale[0]["throughput_img_s"]), rel=1e-3)


@pytest.mark.triton
def test_two_instance_counts_interleave_on_one_model_and_the_count_comes_back(run, bench_triton):
    before = bench_triton.read_state().instances
    recs = ex.instances_ab(run, bench_triton, instances=(2, 1), concurrency=2, opts=SMOKE)
    _ab_ok(recs, "2 instances", "1 instance")
    a, b, r = recs
    assert (a["params"]["instances"], b["params"]["instances"]) == (2, 1)  # each side's records name its count
    assert "instances" not in r["params"] and r["concurrency"] == 2
    for rec in (a, b):
        assert rec["server_stats"]["requests_ok"] >= rec["requests"] > 0  # the server counted its windows' requests
    assert bench_triton.read_state().instances == before  # the model's own count loaded again


@pytest.mark.triton
def test_two_queue_delays_interleave_and_the_grid_takes_their_points(run, bench_triton):
    before = bench_triton.read_state().max_queue_delay_us
    recs = ex.queue_delays_ab(run, bench_triton, delays_us=(3000, 0), concurrency=2, opts=SMOKE)
    _ab_ok(recs, "delay 3000 µs", "delay 0 µs")
    a, b, _ = recs
    assert (a["params"]["max_queue_delay_us"], b["params"]["max_queue_delay_us"]) == (3000, 0)
    grid = ex.queue_delay_grid(run, bench_triton, delays_us=(0, 3000), concurrencies=(1, 2), opts=SMOKE, measured=recs)
    assert [r["params"]["max_queue_delay_us"] for r in grid] == [0, 0, 3000, 3000]
    assert grid[1] is b and grid[3] is a  # concurrency 2 at each delay: the interleaved sides, not measured again
    assert bench_triton.read_state().max_queue_delay_us == before  # the model's own delay loaded again


@pytest.mark.triton
def test_triton_protocols_and_payloads_are_interleaved(run, bench_triton):
    first = ex.http_vs_grpc(run, bench_triton, concurrencies=(2,), opts=SMOKE, experiment="by-batch")
    _ab_ok(first, "grpc", "http")
    # a second table sharing a point takes that point's A/B from the first, and measures only what is new
    both = ex.http_vs_grpc(run, bench_triton, batches=(2,), concurrencies=(2,), opts=SMOKE, experiment="by-conc",
                           measured=first) + ex.http_vs_grpc(run, bench_triton, concurrencies=(2,), opts=SMOKE,
                                                              experiment="by-conc", measured=first)
    assert both[3:] == first and both[0]["batch"] == 2 and both[0]["experiment"] == "by-conc"
    assert sum(r["kind"] == "ab" for r in load_records(run.dir)) == 2
    recs = ex.payload(run, bench_triton, concurrency=1, opts=SMOKE)
    _ab_ok(recs[:3], "triton-http jpeg", "triton-http tensor")
    assert recs[3]["payload"] == "json-lists" and recs[3]["payload_bytes_per_request"] > 3 * 602112
    _ok(recs[3])


def test_peer_baseline_interleaves_servelab_and_litserve(run, bench_service, tmp_path):
    with served("litserve", engine="onnx", payload="jpeg", log_path=tmp_path / "litserve.log") as lit:
        recs = ex.peer_baseline(run, [bench_service.variant(payload="jpeg"), lit], concurrencies=(2,), opts=SMOKE)
    _ab_ok(recs[:3], "fastapi", "litserve")
    assert any(g["goal"] == "servelab / LitServe throughput at c=2" for g in goals_table(recs))
