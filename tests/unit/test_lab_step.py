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
