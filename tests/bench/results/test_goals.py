"""Goals read from records (servelab.bench.results.goals): met, not met or undecided by their bands."""


from servelab.bench.report import goals_table
from servelab.bench.results.goals import goal_record, service_goals, triton_goals
from servelab.bench.results.records import Run


def _rec(run, **kw):
    base = dict(kind="load", server="fastapi", backend="fastapi", engine="onnx", batch=1, stable=True,
                params={"load": {"label": "full"}})
    base.update(kw)
    return run.record("service", **base)


def test_goals_are_met_not_met_or_undecided_by_their_bands(run):
    recs = [
        _rec(run, kind="raw", server="in-process", engine="onnx", batch=1, throughput_img_s=23.0, latency_p50_ms=43.0,
             latency_p50_min_ms=42.0, latency_p50_max_ms=44.0),
        _rec(run, concurrency=1, throughput_img_s=20.0, latency_p50_ms=48.5, latency_p50_min_ms=48.0,
             latency_p50_max_ms=49.0, stable=False),  # +5.5 ms, band +4..+7: not met
        _rec(run, kind="ab", server="fastapi c=16 / raw batch 16", a="fastapi c=16", b="raw batch 16", ratio=0.96,
             ratio_min=0.93, ratio_max=0.99),  # straddles 0.95: undecided
        _rec(run, kind="raw", server="in-process", engine="torch", batch=16, throughput_img_s=29.0,
             throughput_min_img_s=28.5, throughput_max_img_s=29.5),
        _rec(run, kind="raw", server="in-process", engine="onnx-int8", batch=16, throughput_img_s=76.0,
             throughput_min_img_s=75.0, throughput_max_img_s=77.0, cosine_vs_torch_fp32=0.99984),
    ]
    rows = {r["goal"]: r for r in goals_table(service_goals(run, recs))}
    assert rows["onnx: served c=16 / raw batch 16 throughput"]["status"] == "undecided (band straddles the goal)"
    assert rows["onnx: served c=1 p50 - raw batch 1 p50 (ms)"]["status"] == "not met (inputs not stable)"
    assert rows["onnx-int8 / torch fp32 throughput (batch 16)"]["status"] == "met"  # 2.54-2.70 all >= 2.5
    assert rows["onnx-int8 min cosine vs torch fp32"]["status"] == "met"
    quick = goal_record(run, "x", "g", 2.0, ">=", 1.0, inputs=[{"quick": True, "stable": True}])
    assert goals_table([quick])[0]["status"] == "met (quick run: not a result)"


def test_triton_goals_read_the_interleaved_ratios(run):
    def ab(a, b, ratio, lo, hi):
        return _rec(run, kind="ab", server=f"{a} / {b}", a=a, b=b, ratio=ratio, ratio_min=lo, ratio_max=hi, quick=True)

    recs = [ab("triton-grpc c=4", "raw batch 8", 0.97, 0.96, 0.99), ab("triton-http c=4", "raw batch 8", 0.9, 0.85, 0.93),
            ab("triton-grpc jpeg", "triton-grpc tensor", 1.3, 1.2, 1.4)]
    rows = {g["goal"]: g["status"] for g in goals_table(triton_goals(run, recs, concurrency=4, offline_batch=8))}
    assert rows == {"triton-grpc tensor c=4 / offline batch 8": "met (quick run: not a result)",
                    "triton-http tensor c=4 / offline batch 8": "not met (quick run: not a result)",
                    "triton-grpc jpeg / tensor throughput c=4": "met (quick run: not a result)"}


def test_a_goal_names_the_machines_of_the_records_it_was_computed_from(tmp_path):
    run = Run(run_id="g", root=tmp_path)
    a = run.record("x", server="fastapi", throughput_img_s=10.0, params={"served_by": "the node"})
    b = run.record("x", server="in-process", throughput_img_s=5.0)  # this process: names this machine itself
    goal = goal_record(run, "x", "a / b", 2.0, ">=", 1.5, inputs=[a, b])
    assert goal["params"]["served_by"] == f"the node; {b['params']['served_by']}"
    unnamed = run.record("x", server="fastapi", throughput_img_s=1.0)
    assert goal_record(run, "x", "c", 1.0, None, None, inputs=[a, unnamed])["params"]["served_by"] is None
