"""The checks that load a student's Triton configuration into a real embedded tritonserver and measure it: a
working stanza is applied, measured against the default before and after, and the default is back; a wrong
one is refused before the server is touched; the p99 budget is graded from the run's records."""

from __future__ import annotations

import pytest

from servelab.assignments import checks
from servelab.assignments.live import Trials
from servelab.assignments.result import FAIL, PASS, STRICT_ENV
from servelab.bench.load import LoadOpts
from servelab.bench.results.records import Run, load_records
from servelab.triton.control import get_config
from servelab.triton.models import CPU_ENCODER

pytestmark = pytest.mark.triton

OPTS = LoadOpts.smoke(max_windows=2, max_warmup_s=1.0)


@pytest.fixture(autouse=True)
def _not_strict(monkeypatch):
    monkeypatch.delenv(STRICT_ENV, raising=False)


@pytest.fixture
def triton(assignments_triton):
    return assignments_triton


@pytest.fixture
def run(tmp_path):
    return Run(run_id="assignments", root=tmp_path)


def _config(srv):
    cfg = get_config(srv.http_url, CPU_ENCODER)
    return cfg["dynamic_batching"]["max_queue_delay_microseconds"], [g["count"] for g in cfg["instance_group"]]


def live(answer, srv, run, **kw):
    return checks.live_config(answer, run=run, triton_http_url=srv.http_url, model=CPU_ENCODER, max_batch=32,
                              concurrency=2, opts=OPTS, count=2, max_delay_us=3000, exercise="t.live", **kw)


def test_live_config_applies_measures_and_restores(triton, run):
    before = _config(triton)
    r = live("dynamic_batching { max_queue_delay_microseconds: 3000 }\ninstance_group [ { kind: KIND_CPU count: 2 } ]",
             triton, run)
    assert r.status == PASS, r.message
    assert r.detail["verdict"] in ("yours", "default", "tie") and r.detail["yours_img_s"] > 0
    assert r.detail["reading"] in ("ranked", "consistent", "too close")  # the sentences' reading, said in the message
    assert ("indistinguishable here" in r.message) == (r.detail["verdict"] == "tie")
    labels = [rec["params"]["config"] for rec in load_records(run.dir) if rec["experiment"] == "t.live-config"]
    assert labels == ["default", "yours", "default"]  # interleaved: default before and after
    assert _config(triton) == before


@pytest.mark.parametrize("wrong, why", [
    ("instance_group [ { kind: KIND_CPU count: 2 } ]", "no dynamic_batching"),
    ("dynamic_batching { max_queue_delay_microseconds: 3000 }\ninstance_group [ { kind: KIND_CPU count: 1 } ]", "asks for 2"),
    ("dynamic_batching { max_queue_delay_microseconds: 3000 preferred_batch_size: [ 64 ] }\n"
     "instance_group [ { kind: KIND_CPU count: 2 } ]", "outside"),
    ("dynamic_batching { max_queue_delay: 3000 }", "would not load"),
])
def test_live_config_rejects_before_touching_the_server(triton, run, wrong, why):
    r = live(wrong, triton, run)
    assert r.status == FAIL and why in r.message, r.message
    assert not (run.dir / "records.jsonl").exists()


def test_p99_budget_graded_from_records(triton, run):
    trials = Trials(run, triton.http_url, CPU_ENCODER, OPTS, "t-p99")

    def explore(trials, budget_ms):
        results = [trials(concurrency=1), trials(concurrency=2, max_queue_delay_us=1000)]
        within = [t for t in results if t["latency_p99_ms"] <= budget_ms and not t["errors"]]
        return max(within, key=lambda t: t["throughput_img_s"])["trial"]

    r = checks.p99_budget(explore, trials=trials, budget_ms=60_000, exercise="t.p99")
    assert r.status == PASS, r.message
    assert r.detail["score_img_s"] > 0 and r.detail["trials"] == 2
    # a budget nothing meets; a trial that does not exist; a made-up number instead of a trial
    assert checks.p99_budget(1, trials=trials, budget_ms=0.001, exercise="t").status == FAIL
    r = checks.p99_budget(99, trials=trials, budget_ms=60_000, exercise="t")
    assert r.status == FAIL and "not in this run's records" in r.message
    assert checks.p99_budget(12.5, trials=trials, budget_ms=60_000, exercise="t").status == FAIL
    assert _config(triton)[1] == [1]


def test_p99_budget_rejects_a_clearly_worse_trial(run):
    trials = Trials(run, "http://127.0.0.1:9", CPU_ENCODER, OPTS, "t-p99b")  # grading reads records only
    recs = []
    trials._baseline = {"throughput_img_s": 10.0, "window_throughput_img_s": [9.0, 11.0], "errors": 0, "requests": 10}
    trials.baseline_after = trials.baseline  # the same figure after the trials (the server here is not running)
    for rate in (10.0, 100.0):  # two trials with well separated windows, written as records (nothing measured)
        recs.append(run.record("t-p99b", kind="load", server="triton-http", throughput_img_s=rate,
                               window_throughput_img_s=[rate * 0.95, rate * 1.05], latency_p99_ms=50.0, requests=10,
                               errors=0, params={"trial": len(recs) + 1, "settings": {}}))
    r = checks.p99_budget(1, trials=trials, budget_ms=1000, exercise="t")
    assert r.status == FAIL and "clearly above" in r.message
    assert checks.p99_budget(2, trials=trials, budget_ms=1000, exercise="t").status == PASS


def test_p99_budget_takes_the_baseline_config_as_no_worse_than_itself(run):
    trials = Trials(run, "http://127.0.0.1:9", CPU_ENCODER, OPTS, "t-p99c")
    assert trials.opts.min_requests >= Trials.MIN_WINDOW_REQUESTS  # one-request windows carry no spread
    trials._baseline = {"throughput_img_s": 10.0, "window_throughput_img_s": [9.5, 10.5], "errors": 0, "requests": 10}
    trials.baseline_after = trials.baseline
    for concurrency in (1, 2):  # the same slow figure: once as the default config, once with two clients
        settings = {"concurrency": concurrency, "max_queue_delay_us": None, "instances": None, "preferred_batch_size": None}
        run.record("t-p99c", kind="load", server="triton-http", throughput_img_s=5.0, window_throughput_img_s=[4.9, 5.1],
                   latency_p99_ms=50.0, requests=10, errors=0, params={"trial": concurrency, "settings": settings})
    r = checks.p99_budget(2, trials=trials, budget_ms=1000, exercise="t")
    assert r.status == FAIL and "less throughput than one client" in r.message
    assert checks.p99_budget(1, trials=trials, budget_ms=1000, exercise="t").status == PASS  # it is the baseline's config
    del trials.baseline_after  # measured for real against a server that is not there: nothing to compare with
    r = checks.p99_budget(1, trials=trials, budget_ms=1000, exercise="t")
    assert r.status == FAIL and "baseline measured after your trials: requests failed" in r.message
