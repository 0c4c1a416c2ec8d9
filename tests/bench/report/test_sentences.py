"""Tables, plots and the cost table from records; the sentences that read a comparison."""

import csv

from servelab.bench import report
from servelab.bench.report import leader, ratio_figure, ratio_sentence, ratio_verdict, versus, write_report
from servelab.bench.results.records import Run, load_records


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


# --- "what this run shows": every sentence reads a comparison the one way (servelab.bench.report.verdicts) --------------

A = {"throughput_img_s": 20.0, "throughput_min_img_s": 19.0, "throughput_max_img_s": 21.0, "stable": True}


def _ratio(v, lo, hi, pairs=3, **kw):
    return {"ratio": v, "ratio_min": lo, "ratio_max": hi, "repeats": pairs, "a": "grpc", "b": "http", **kw}


def test_sentences_never_rank_overlapping_figures():
    b = {"throughput_img_s": 20.5, "window_throughput_img_s": [20.2, 20.5, 20.9], "stable": True}
    assert versus("A", A, "B", b).endswith("are indistinguishable here: their ranges overlap")
    near = {"throughput_img_s": 20.9, "throughput_min_img_s": 20.6, "throughput_max_img_s": 21.2, "stable": True}
    assert "indistinguishable here at the top" in leader({"A": A, "N": near})
    # a tie is named in the order given, whichever measured higher: the sentence does not change with the noise
    assert leader({"A": A, "N": near}).startswith("A (20.0 img/s (19.0–21.0)) and N (20.9 img/s (20.6–21.2)) are")
    assert leader({"N": near, "A": A}).startswith("N (20.9 img/s (20.6–21.2)) and A (20.0 img/s (19.0–21.0)) are")
    assert "indistinguishable here: one window, no spread recorded" in versus("A", A, "D", {"throughput_img_s": 5.0})


def test_a_settled_lead_past_the_margin_is_ranked():
    c = {"throughput_img_s": 15.0, "throughput_min_img_s": 14.0, "throughput_max_img_s": 16.0, "stable": True}
    assert versus("A", A, "C", c) == "A reached 20.0 img/s (19.0–21.0), above C's 15.0 img/s (14.0–16.0)"
    assert leader({"C": c, "A": A}) == "A (20.0 img/s (19.0–21.0)) was highest, clear of C"
    lat = versus("A", {"latency_p50_ms": 50, "latency_p50_min_ms": 49, "latency_p50_max_ms": 52}, "B",
                 {"latency_p50_ms": 60, "latency_p50_min_ms": 58, "latency_p50_max_ms": 63}, metric="latency_p50_ms",
                 unit="ms", digits=0)
    assert lat == "A reached 50 ms (49–52), below B's 60 ms (58–63)"


def test_ranges_apart_inside_the_margin_are_a_lead_with_its_size_never_indistinguishable():
    near8 = {"throughput_img_s": 18.4, "throughput_min_img_s": 18.2, "throughput_max_img_s": 18.6, "stable": True}
    said = versus("A", A, "N", near8)
    assert said == ("A reached 20.0 img/s (19.0–21.0), above N's 18.4 img/s (18.2–18.6): A ahead of N by 9 % in every "
                    "window, below the 10 % margin we rank figures measured at different times by")
    assert "indistinguishable" not in leader({"A": A, "N": near8}) and "A ahead of N by 9 %" in leader({"A": A, "N": near8})


def test_a_figure_that_never_settled_is_not_ranked_but_its_direction_is_said():
    c = {"throughput_img_s": 15.0, "throughput_min_img_s": 14.0, "throughput_max_img_s": 16.0, "stable": False}
    said = versus("A", A, "C", c)
    assert said.endswith("A ahead of C in every window (by 33 %), but C never settled (its windows kept moving), so "
                         "this run does not rank them")
    assert "C never settled" in leader({"A": A, "C": c}) and "clear of" not in leader({"A": A, "C": c})
    wobbly = dict(c, throughput_max_img_s=19.5)  # unsettled and reaching A's band: too close, the reason named
    assert versus("A", A, "W", wobbly) == ("A (20.0 img/s (19.0–21.0)) and W (15.0 img/s (14.0–19.5)) are "
                                           "indistinguishable here: their ranges overlap and W never settled (its "
                                           "windows kept moving)")
    assert "W never settled" in leader({"A": A, "W": wobbly})


def test_the_drift_margin_never_makes_ranges_apart_indistinguishable():
    # notebook 03's case: ranges apart, a lead smaller than this run's drift: the direction and its size, and why
    # the run does not rank it
    fp32 = {"throughput_img_s": 4.0, "throughput_min_img_s": 3.9, "throughput_max_img_s": 4.1, "stable": True}
    int8 = {"throughput_img_s": 6.3, "throughput_min_img_s": 6.1, "throughput_max_img_s": 6.5, "stable": True}
    assert versus("int8", int8, "fp32", fp32) == "int8 reached 6.3 img/s (6.1–6.5), above fp32's 4.0 img/s (3.9–4.1)"
    said = versus("int8", int8, "fp32", fp32, drift=0.6)  # the drift is an argument: nothing else changes
    assert "indistinguishable" not in said
    assert said.endswith("int8 ahead of fp32 by 57 % in every window, within the 60 % this machine drifted during "
                         "this run (drift probe), so the order may be the machine's")
    # an interleaved ratio cancels the drift: its margin is the fixed 10 %, whatever the probe measured
    assert ratio_verdict(_ratio(1.15, 1.11, 1.2)) == ("grpc", "")
    assert report.margin(drift=0.6) == 0.6 and report.margin(drift=0.05) == report.margin() == report.MIN_EFFECT_APART
    assert report.margin(interleaved=True, drift=0.6) == report.MIN_EFFECT_INTERLEAVED


def test_ratio_sentences_rank_a_consistent_lead_or_call_it_too_close():
    assert ratio_sentence(_ratio(1.31, 1.2, 1.4, pairs=2)).endswith("grpc ahead by 31 %, every pair past the 10 % margin")
    small = ratio_sentence(_ratio(1.07, 1.02, 1.12, pairs=4))
    assert small.endswith("grpc ahead by 7 %, all 4 pairs agree, below the 10 % margin we rank by")
    assert ratio_verdict(_ratio(1.07, 1.02, 1.12, pairs=4))[0] is None  # a direction, not a ranking
    assert ratio_sentence(_ratio(0.93, 0.9, 0.96)).endswith("http ahead by 8 %, all 3 pairs agree, below the 10 % "
                                                             "margin we rank by")
    assert ratio_sentence(_ratio(1.03, 0.97, 1.08)).endswith(
        "grpc and http are indistinguishable here: the pairs fall on both sides of 1, too close to call")
    unsettled = ratio_sentence(_ratio(1.5, 1.4, 1.6, stable=False))
    assert "never settled" in unsettled and "rank" in unsettled
    assert ratio_verdict(_ratio(0.7, 0.65, 0.75)) == ("http", "")


def test_a_quoted_ratio_keeps_its_figure_and_leaves_the_ranking_to_its_own_sentence():
    ranked, tie = _ratio(1.31, 1.2, 1.4), _ratio(1.03, 0.97, 1.08)
    assert ratio_figure(ranked) == "grpc ÷ http throughput: 1.31× (pairs 1.20–1.40)"
    assert ratio_sentence(ranked).startswith(ratio_figure(ranked) + "; grpc ahead by 31 %")
    smoke = ratio_figure({**tie, "quick": True})
    assert smoke.endswith("(smoke run: these numbers are not results)")
    assert ratio_sentence({**tie, "quick": True}).endswith("too close to call (smoke run: these numbers are not results)")


def test_every_sentence_is_rendered_from_its_findings_fields():
    from servelab.bench.report import Finding, leader_finding, ratio_finding, say, versus_finding

    c = {"throughput_img_s": 15.0, "throughput_min_img_s": 14.0, "throughput_max_img_s": 16.0, "stable": False}
    found = [ratio_finding(_ratio(1.07, 1.02, 1.12, pairs=4, concurrency=8)), ratio_finding(_ratio(1.03, 0.97, 1.08)),
             versus_finding("A", A, "C", c, drift=0.3), leader_finding({"A": A, "C": c, "D": dict(A, stable=True)})]
    assert [f.key for f in found] == ["grpc÷http throughput c=8", "grpc÷http throughput", "A vs C throughput_img_s",
                                      "leader of A, C, D throughput_img_s"]
    assert say(found[0]) == ratio_sentence(_ratio(1.07, 1.02, 1.12, pairs=4, concurrency=8))
    assert say(found[2]) == versus("A", A, "C", c, drift=0.3)
    assert say(found[3]) == leader({"A": A, "C": c, "D": dict(A, stable=True)})
    for f in found:  # the stored fields make the same sentence
        again = Finding.from_dict(f.to_dict())
        assert again == f and say(again) == say(f)
    assert found[0].ahead == "grpc" and found[0].verdict.reading == "consistent" and found[1].ahead is None
    assert found[3].tied == ("A", "D") and found[3].ahead is None
