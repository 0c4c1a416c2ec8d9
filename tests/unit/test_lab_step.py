"""The notebook display helpers: code shown from source, not pasted."""

from __future__ import annotations

import pytest

from servelab.lab import step


def test_show_code_cuts_between_markers(monkeypatch):
    shown = []
    monkeypatch.setattr(step, "_display_md", shown.append)
    step.show_code(step.repo_path("servelab", "service", "batcher.py"), "async def _loop", "def _queued_images")
    body = shown[0]
    assert "async def _loop" in body and "run_in_executor" in body and "def _queued_images" not in body
    with pytest.raises(ValueError, match="no line contains"):
        step.show_code(step.repo_path("servelab", "service", "batcher.py"), "no such line anywhere")


def _load_record(server: str, served_by: str) -> dict:
    from servelab.bench.results.records import make_record

    return make_record("98-x", "r", server=server, throughput_img_s=10.0, params={"served_by": served_by})


def test_rows_served_by_another_machine_say_so_at_the_node(tmp_path, monkeypatch):
    """At place=node, a server the notebook started (this machine's CPU) ranked against a node server: each row
    names its machine, and a sentence says the comparison is between machines as well as servers."""
    import csv

    shown = []
    monkeypatch.setattr(step, "_display_md", shown.append)
    here, node = "this machine (laptop: Intel · 2 cores · no GPU)", "node1: AMD EPYC · 64 cores · NVIDIA A100"
    recs = [_load_record("fastapi", here), _load_record("triton-http", node)]
    s = step.Step("98", tmp_path / "run", "node")
    df = s.frame(recs, "server", "throughput_img_s")
    assert list(df["served_by"]) == [here, node]
    assert any("Served by different machines" in t and here in t and node in t for t in shown)
    s.table(df, "mixed", show=False)
    rows = list(csv.DictReader(open(tmp_path / "run" / "tables" / "98_mixed.csv")))
    assert [r["served_by"] for r in rows] == [here, node]
    # one machine: every row of the table made from those records is tagged with it
    s.table(s.frame(recs[1:], "server", "throughput_img_s"), "node_only", show=False)
    rows = list(csv.DictReader(open(tmp_path / "run" / "tables" / "98_node_only.csv")))
    assert [r["served_by"] for r in rows] == [node]
    # locally every server runs here: no column, no sentence
    shown.clear()
    local = step.Step("97", tmp_path / "run", "local").frame(recs, "server")
    assert "served_by" not in local.columns and not shown


def test_earlier_gives_only_this_lab_runs_records_of_the_named_notebooks(tmp_path):
    """A lab run reuses what an earlier notebook of the same run measured; records from before the run started
    (an interactive folder accumulates sessions) and notebooks opened on their own get none, and measure."""
    import json

    from servelab.bench.results.records import make_record

    out = tmp_path / "run"
    out.mkdir()
    recs = [make_record("04-triton-concurrency", "run", server="triton-http", concurrency=1),
            make_record("04-old", "run", server="triton-http"), make_record("05a-queue-delay", "run")]
    recs[1]["timestamp"] = "2020-01-01T00:00:00+00:00"  # a session long before this run
    (out / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    alone = step.Step("06a", out)
    assert alone.earlier("04") == []  # no run.json: not inside a lab run
    (out / "run.json").write_text(json.dumps({"started": "2024-06-01T12:00:00"}))
    inside = step.Step("06a", out)
    assert [r["experiment"] for r in inside.earlier("04")] == ["04-triton-concurrency"]
    assert [r["experiment"] for r in inside.earlier("04", "05a")] == ["04-triton-concurrency", "05a-queue-delay"]


def test_an_optional_step_that_cannot_run_is_recorded_as_not_run(tmp_path, monkeypatch):
    import csv

    shown = []
    monkeypatch.setattr(step, "_display_md", shown.append)
    s = step.Step("98", tmp_path / "run", "local")
    assert s.skip_unless(True, "a", "never said") is True
    assert s.skip_unless(0, "perf_analyzer", "no binary on this machine", "the command above") is False
    with s.attempt("Triton's trace", "the /stats histogram"):
        raise RuntimeError("this Triton writes no trace file")
    with pytest.raises(KeyError):  # an error that is not about this machine is not swallowed
        with s.attempt("x"):
            raise KeyError("bug")
    rows = list(csv.DictReader(open(tmp_path / "run" / "tables" / "98_not_run.csv")))
    assert [(r["not run"], r["why"], r["instead"]) for r in rows] == [
        ("perf_analyzer", "no binary on this machine", "the command above"),
        ("Triton's trace", "this Triton writes no trace file", "the /stats histogram")]
    assert any("Not run here:** perf_analyzer" in t for t in shown)


def test_a_headline_stores_the_findings_it_states_with_the_steps_margin(tmp_path, monkeypatch):
    from servelab.bench.load.drift import EXPERIMENT
    from servelab.bench.report.headlines import findings, load_headlines
    from servelab.bench.results.records import Run

    monkeypatch.setattr(step, "_display_md", lambda text: None)
    run = Run(run_id="lab", root=tmp_path)
    for v in (15.0, 15.3, 12.0):  # the probe moved ~25 %: figures measured apart need more than that
        run.record(EXPERIMENT, kind="probe", server="in-process", throughput_img_s=v)
    s = step.Step("03", run.dir)
    fig = lambda v: {"throughput_img_s": v, "throughput_min_img_s": v - 0.1, "throughput_max_img_s": v + 0.1,  # noqa: E731
                     "stable": True}
    ratio = {"ratio": 1.3, "ratio_min": 1.2, "ratio_max": 1.4, "repeats": 4, "a": "grpc", "b": "http", "concurrency": 8}
    apart = s.versus("int8", fig(6.0), "fp32", fig(5.0))  # 20 % apart: below this run's drift
    assert "drifted during this run" in apart
    s.ratio({**ratio, "a": "said", "b": "elsewhere"})  # said in an answer, not in the headline: not stored
    s.shows(f"Engines: {apart}; protocols: {s.ratio(ratio)}; {s.leader({'int8': fig(6.0), 'fp32': fig(5.0)})}.")
    stored = findings(load_headlines(run.dir)["03"])
    assert list(stored) == ["int8 vs fp32 throughput_img_s", "grpc÷http throughput c=8",
                            "leader of int8, fp32 throughput_img_s"]
    assert stored["int8 vs fp32 throughput_img_s"].verdict.margin == s.margin() > 0.2
    assert stored["grpc÷http throughput c=8"].verdict.ranked and stored["grpc÷http throughput c=8"].ahead == "grpc"
    s.shows("No comparison stated.")  # what was said before the last headline is not carried into the next
    assert load_headlines(run.dir)["03"]["verdicts"] == []


def test_step_takes_the_margin_from_this_runs_probes(tmp_path):
    from servelab.bench import report
    from servelab.bench.load.drift import EXPERIMENT, drift
    from servelab.bench.results.records import Run
    from servelab.lab.step import Step

    run = Run(run_id="lab", root=tmp_path)
    first = Step("01", run.dir)
    assert first.machine_drift is None and first.margin() == report.MIN_EFFECT_APART
    for v in (15.0, 15.3, 12.0):
        run.record(EXPERIMENT, kind="probe", server="in-process", throughput_img_s=v)
    step = Step("02", run.dir)
    assert step.machine_drift == pytest.approx(drift([15.0, 15.3, 12.0])) and step.machine_drift > 0.2
    assert step.margin() == step.machine_drift and step.margin(interleaved=True) == report.MIN_EFFECT_INTERLEAVED
    assert report.margin() == report.MIN_EFFECT_APART  # the step's margin is its own, not the module's
    assert first.margin() == report.MIN_EFFECT_APART
