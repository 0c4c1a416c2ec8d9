"""Predict, then measure: the bands a check reads from a table are the bench's own, overlapping bands are a tie,
and a check and the sentence under it read the same records the same way."""

from __future__ import annotations

import pandas as pd
import pytest

from servelab.assignments import checks
from servelab.assignments.result import FAIL, STRICT_ENV


@pytest.fixture(autouse=True)
def _not_strict(monkeypatch):
    monkeypatch.delenv(STRICT_ENV, raising=False)


def _windows(name, values, **kw):
    return {"server": name, "throughput_img_s": sum(values) / len(values), "window_throughput_img_s": values, **kw}


CLOSE = pd.DataFrame([_windows("fastapi", [20.0, 23.0, 21.0]), _windows("triton-http", [22.0, 24.0, 23.5])])


APART = pd.DataFrame([_windows("fastapi", [20.0, 21.0, 20.5]), _windows("triton-http", [26.0, 27.0, 26.5])])


def test_measured_bands_from_windows_spread_and_rows():
    b = checks.measured_bands(CLOSE, key="server")
    assert (b.loc["fastapi", "lo"], b.loc["fastapi", "hi"]) == (20.0, 23.0) and b.loc["fastapi", "source"] == "windows"
    lat = pd.DataFrame({"protocol": ["http", "grpc"], "latency_p99_ms": [100.0, 90.0], "spread": [0.2, 0.1]})
    b = checks.measured_bands(lat, key="protocol", metric="latency_p99_ms")
    assert b.loc["http", "lo"] == pytest.approx(90.0) and b.loc["http", "hi"] == pytest.approx(110.0)
    one = checks.measured_bands(pd.DataFrame({"k": ["a"], "throughput_img_s": [5.0]}), key="k")
    assert one.loc["a", "lo"] == one.loc["a", "hi"] == 5.0 and "no spread" in one.loc["a", "source"]


def reading(bands):
    a, b = bands.index
    if bands.loc[a, "lo"] <= bands.loc[b, "hi"] and bands.loc[b, "lo"] <= bands.loc[a, "hi"]:
        return "tie"
    return bands["value"].idxmax()


@pytest.mark.parametrize("table, right, wrong", [
    (CLOSE, "tie", ["triton-http", "fastapi"]),
    (APART, "triton-http", ["tie", "fastapi", "litserve"]),
])
def test_outcome_is_graded_against_the_bands(table, right, wrong):
    kw = dict(key="server", a="fastapi", b="triton-http", exercise="t")
    assert checks.outcome(reading, table, **kw).passed
    assert checks.outcome(right, table, **kw).passed
    for w in wrong:
        r = checks.outcome(w, table, **kw)
        assert r.status == FAIL
        assert w == "litserve" or right not in r.message  # the hint never names the outcome
        assert "measured" not in r.detail  # a failed answer's record does not give the outcome away


def test_outcome_lower_is_better_and_the_prediction_is_reported_not_graded():
    lat = pd.DataFrame({"protocol": ["http", "grpc"], "latency_p99_ms": [100.0, 60.0], "spread": [0.05, 0.05]})
    kw = dict(key="protocol", a="http", b="grpc", metric="latency_p99_ms", higher_is_better=False, exercise="t")
    r = checks.outcome("grpc", lat, prediction="tie", **kw)
    assert r.passed and "did not hold" in r.message
    assert r.detail == {"prediction": "tie", "measured": "grpc", "prediction_held": False}
    r = checks.outcome("grpc", lat, prediction="grpc", **kw)
    assert r.passed and r.detail["prediction_held"] is True
    assert "no prediction" in checks.outcome("grpc", lat, **kw).message
    assert checks.outcome("http", lat, **kw).status == FAIL


def _rec(name, lo, hi, stable=True):
    return {"server": name, "throughput_img_s": (lo + hi) / 2, "throughput_min_img_s": lo, "throughput_max_img_s": hi,
            "stable": stable}


@pytest.mark.parametrize("fastapi, triton, said", [
    (_rec("fastapi", 20.0, 22.0), _rec("triton-http", 21.0, 23.0), "indistinguishable here"),    # ranges overlap
    (_rec("fastapi", 20.0, 21.0), _rec("triton-http", 21.5, 23.0), "below the 10 % margin"),     # apart, 7 %: a lead
    (_rec("fastapi", 15.0, 16.0), _rec("triton-http", 21.5, 23.0), None),                        # apart, 43 %: ranked
    (_rec("fastapi", 20.0, 21.0), _rec("triton-http", 25.0, 27.0, stable=False), "never settled"),
])
def test_the_check_and_the_sentence_agree(fastapi, triton, said):
    from servelab.bench.report import apart_reading, versus

    sentence = versus("fastapi", fastapi, "triton-http", triton)
    reading = apart_reading(fastapi, triton)
    side = reading.side("fastapi", "triton-http") if reading.ranked else "tie"  # what the run does not rank is a tie
    kw = dict(key="server", a="fastapi", b="triton-http", exercise="t")
    results = {answer: checks.outcome(answer, [fastapi, triton], **kw) for answer in ("fastapi", "triton-http", "tie")}
    assert [a for a, r in results.items() if r.passed] == [side]
    if side == "tie":
        assert "indistinguishable here" in sentence or "below the" in sentence or "never settled" in sentence
    else:
        assert "indistinguishable" not in sentence and "below the" not in sentence
        assert sentence.startswith("fastapi reached") and ("below" if side == "triton-http" else "above") in sentence
    if said:
        assert said in sentence and said in results["tie"].message  # the check says it in the sentence's words
    best = checks.best_choice(side if side != "tie" else "fastapi", [fastapi, triton], key="server",
                              metric="throughput_img_s", exercise="t")
    assert best.passed


def test_a_lead_below_the_margin_is_a_tie_and_naming_a_side_fails_with_the_margin():
    fastapi, triton = _rec("fastapi", 20.0, 21.0), _rec("triton-http", 21.5, 23.0)  # apart, 9 %
    kw = dict(key="server", a="fastapi", b="triton-http", exercise="t")
    bands = checks.measured_bands([fastapi, triton], key="server")
    assert (bands["margin"] == 0.10).all()  # the student's function is given the run's margin
    r = checks.outcome("triton-http", [fastapi, triton], **kw)
    assert r.status == FAIL and "below this run's 10 % margin" in r.message and "measured" not in r.detail
    r = checks.outcome("tie", [fastapi, triton], **kw)
    assert r.passed and "triton-http ahead of fastapi by 9 % in every window, below the 10 % margin" in r.message
    assert checks.outcome(reading_with_margin, [fastapi, triton], **kw).passed
    assert not checks.outcome(reading, [fastapi, triton], **kw).passed  # band overlap alone is not the run's rule
    far = _rec("triton-http", 25.0, 27.0)  # apart, 27 %: ranked, the side is still needed
    assert checks.outcome("triton-http", [fastapi, far], **kw).passed
    r = checks.outcome("tie", [fastapi, far], **kw)
    assert r.status == FAIL and "past this run's 10 % margin" in r.message
    assert checks.outcome(reading_with_margin, [fastapi, far], **kw).passed
    r = checks.best_choice("triton-http", [fastapi, triton], key="server", metric="throughput_img_s", exercise="t")
    assert r.passed and "by 9 % in every window" in r.message
    r = checks.best_choice("fastapi", [fastapi, triton], key="server", metric="throughput_img_s", exercise="t")
    assert r.passed and "tied with 1 other" in r.message  # the run does not rank triton-http above it
    r = checks.best_choice("fastapi", [fastapi, far], key="server", metric="throughput_img_s", exercise="t")
    assert r.status == FAIL and "10 % margin" in r.message


def test_a_side_that_never_settled_is_a_tie():
    fastapi, triton = _rec("fastapi", 15.0, 16.0), _rec("triton-http", 25.0, 27.0, stable=False)
    kw = dict(key="server", a="fastapi", b="triton-http", exercise="t")
    r = checks.outcome("triton-http", [fastapi, triton], **kw)
    assert r.status == FAIL and "never settled" in r.message
    assert checks.outcome("tie", [fastapi, triton], **kw).passed
    assert checks.outcome(reading_with_margin, [fastapi, triton], **kw).passed


def reading_with_margin(bands):
    """The run's rule from the bands alone: apart, both settled, the lead past `margin` — else a tie."""
    a, b = (bands.loc[k] for k in bands.index)
    if (a["source"] == checks.NO_SPREAD) != (b["source"] == checks.NO_SPREAD) or False in (a["settled"], b["settled"]):
        return "tie"
    if a["lo"] <= b["hi"] and b["lo"] <= a["hi"]:
        return "tie"
    if max(a["value"], b["value"]) / min(a["value"], b["value"]) - 1 <= a["margin"]:
        return "tie"
    return bands["value"].idxmax()


def test_the_check_ranks_by_the_runs_margin_when_a_step_carries_its_drift(tmp_path):
    """A lab step whose run drifted 30 % widens the margin the check ranks by, as it does for the run's sentences."""
    from servelab.lab.step import Step

    fastapi, triton = _rec("fastapi", 20.0, 21.0), _rec("triton-http", 24.0, 25.0)  # about 19 % apart
    ranked = checks.outcome("triton-http", [fastapi, triton], key="server", a="fastapi", b="triton-http",
                            exercise="t")
    assert ranked.passed and "below the" not in ranked.message
    step = Step("98", tmp_path / "run")
    step.machine_drift = 0.3
    drifted = checks.outcome("triton-http", [fastapi, triton], key="server", a="fastapi", b="triton-http",
                             exercise="t", step=step)
    assert drifted.status == FAIL and "30 % margin" in drifted.message  # a 20 % lead is below the run's 30 %
    assert checks.outcome("tie", [fastapi, triton], key="server", a="fastapi", b="triton-http", exercise="t",
                          step=step).passed


def test_a_tail_latency_is_banded_alike_by_the_check_and_the_sentence():
    from servelab.bench.report import versus

    http = {"protocol": "http", "latency_p99_ms": 100.0, "spread": 0.2, "stable": True}   # band 90–110
    grpc = {"protocol": "grpc", "latency_p99_ms": 80.0, "spread": 0.1, "stable": True}    # band 76–84: apart, 25 %
    kw = dict(key="protocol", a="http", b="grpc", metric="latency_p99_ms", higher_is_better=False, exercise="t")
    assert checks.outcome("grpc", [http, grpc], **kw).passed
    assert versus("gRPC", grpc, "HTTP", http, metric="latency_p99_ms", unit="ms", digits=0) == (
        "gRPC reached 80 ms (76–84), below HTTP's 100 ms (90–110)")
    grpc_near = dict(grpc, latency_p99_ms=95.0)  # overlapping bands: a tie in both
    assert checks.outcome("tie", [http, grpc_near], **kw).passed
    assert "indistinguishable here" in versus("gRPC", grpc_near, "HTTP", http, metric="latency_p99_ms", unit="ms")


def _one_window(name, value):
    """A record measured in a single window, as a smoke run writes it: min = max, a spread of 0, repeats 1."""
    return {"server": name, "throughput_img_s": value, "throughput_min_img_s": value, "throughput_max_img_s": value,
            "window_throughput_img_s": [value], "repeats": 1, "spread": 0.0, "stable": True}


def test_a_single_window_beside_measured_windows_is_no_spread_for_the_check_as_for_the_sentence():
    from servelab.bench.report import versus

    one, many = _one_window("fastapi", 20.0), _windows("triton-http", [26.0, 27.0, 26.5], repeats=3, stable=True)
    kw = dict(key="server", a="fastapi", b="triton-http", exercise="t")
    assert checks.outcome("tie", [one, many], **kw).passed
    r = checks.outcome("triton-http", [one, many], **kw)
    assert r.status == FAIL and "records no spread for one of the two" in r.message
    assert "indistinguishable here" in versus("fastapi", one, "triton-http", many)
    assert checks.measured_bands([one, many], key="server").loc["fastapi", "source"] == "one value (no spread measured)"
    both_single = [one, _one_window("triton-http", 26.5)]  # a table with no spread anywhere reads as exact numbers
    assert checks.outcome("triton-http", both_single, **kw).passed


def test_a_table_joining_records_with_and_without_window_lists_is_read_per_record():
    windowed = _windows("fastapi", [19.0, 21.0])
    spread_only = {"server": "triton-http", "throughput_img_s": 30.0, "spread": 0.1, "repeats": 3}  # band 28.5–31.5
    bands = checks.measured_bands(pd.DataFrame([windowed, spread_only]), key="server")
    assert (bands.loc["fastapi", "lo"], bands.loc["fastapi", "hi"]) == (19.0, 21.0)
    assert bands.loc["triton-http", "lo"] == pytest.approx(28.5) and bands.loc["triton-http", "hi"] == pytest.approx(31.5)
    assert checks.outcome("triton-http", [windowed, spread_only], key="server", a="fastapi", b="triton-http",
                          exercise="t").passed
