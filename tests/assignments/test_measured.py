"""Answers read off a measured table: each check accepts the solution and rejects plausible wrong answers on
synthetic tables shaped like this lab's records; hints never contain the expected answer; a row within the
measured spread of the best is as good as the best."""

from __future__ import annotations

import pandas as pd
import pytest

from servelab.assignments import checks
from servelab.assignments.result import FAIL, PASS, STRICT_ENV
from tests.assignments.grids import GRID, qd


@pytest.fixture(autouse=True)
def _not_strict(monkeypatch):
    monkeypatch.delenv(STRICT_ENV, raising=False)




def test_queue_delay_accepts_best_within_budget():
    assert qd(2000).status == PASS


@pytest.mark.parametrize("wrong, why", [
    (10000, "over the"),         # the highest-throughput delay, but it breaks the budget
    (0, "more"),                 # within budget, but leaves throughput on the table
    (5000, "not a delay"),       # not measured in this run
])
def test_queue_delay_rejects(wrong, why):
    r = qd(wrong)
    assert r.status == FAIL and why in r.message
    assert "2000" not in r.message  # never the answer


def test_queue_delay_at_one_concurrency_and_none_fits():
    assert checks.queue_delay_for_budget(0, GRID, 62.0, concurrency=1, exercise="t").status == PASS
    assert checks.queue_delay_for_budget(2000, GRID, 62.0, concurrency=1, exercise="t").status == FAIL
    assert checks.queue_delay_for_budget(None, GRID, 10.0, exercise="t").status == PASS
    assert checks.queue_delay_for_budget(0, GRID, 10.0, exercise="t").status == FAIL


def test_queue_delay_within_the_spread_of_the_best_is_a_tie():
    windows = {0: [24.0, 28.0], 2000: [27.0, 31.0], 10000: [30.0, 32.0]}  # 0 µs overlaps 2000 µs's band
    grid = GRID.assign(window_throughput_img_s=[windows[d] if c == 8 else [t, t] for d, c, t in
                                                zip(GRID.queue_delay_us, GRID.concurrency, GRID.throughput_img_s,
                                                    strict=True)])
    assert checks.queue_delay_for_budget(0, grid, 250.0, exercise="t").passed
    assert not qd(0).passed  # without windows the same numbers are not a tie


def _apart(thr0):
    """The grid with window bands at concurrency 8 that never overlap: 0 µs at `thr0`, 2000 µs at 29 img/s."""
    thr = {0: thr0, 2000: 29.0, 10000: 31.0}
    return GRID.assign(throughput_img_s=[thr[d] if c == 8 else t for d, c, t in
                                         zip(GRID.queue_delay_us, GRID.concurrency, GRID.throughput_img_s, strict=True)],
                       window_throughput_img_s=[[thr[d] - 0.2, thr[d] + 0.2] if c == 8 else [t, t] for d, c, t in
                                                zip(GRID.queue_delay_us, GRID.concurrency, GRID.throughput_img_s,
                                                    strict=True)],
                       stable=True)


def test_queue_delay_below_the_best_by_less_than_the_runs_margin_passes(tmp_path):
    from servelab.lab.step import Step

    r = checks.queue_delay_for_budget(0, _apart(27.2), 250.0, exercise="t")  # apart, 7 %: not ranked below
    assert r.passed and "does not rank below the best" in r.message and "below the 10 % margin" in r.message
    r = checks.queue_delay_for_budget(0, _apart(25.0), 250.0, exercise="t")  # apart, 16 %: ranked below
    assert r.status == FAIL and "10 % margin" in r.message and "2000" not in r.message
    step = Step("98", tmp_path / "run")
    step.machine_drift = 0.3  # a run that drifted 30 % ranks no 16 % lead
    assert checks.queue_delay_for_budget(0, _apart(25.0), 250.0, exercise="t", step=step).passed
    assert checks.queue_delay_for_budget(2000, _apart(25.0), 250.0, exercise="t").passed


# serialisation table (bench serialisation_costs rows) at two batch sizes
SERIAL = pd.DataFrame([
    {"payload": p, "batch": b, "bytes_per_request": n * b}
    for b in (1, 8)
    for p, n in (("json-lists", 1_900_000), ("binary-tensor", 602_112), ("jpeg", 24_000), ("base64-json", 32_100))
])


def test_smallest_payload():
    assert checks.smallest_payload("jpeg", SERIAL, batch=8, exercise="t").passed
    assert checks.smallest_payload("JPEG", SERIAL, exercise="t").passed
    assert checks.smallest_payload(lambda t: t.loc[t.bytes_per_request.idxmin(), "payload"], SERIAL, exercise="t").passed
    for wrong, why in [("binary-tensor", "× the size"), ("base64-json", "× the size"), ("protobuf", "not one of")]:
        r = checks.smallest_payload(wrong, SERIAL, batch=8, exercise="t")
        assert r.status == FAIL and why in r.message and "jpeg" not in r.message.lower()


BACKENDS = pd.DataFrame({
    "backend": ["fastapi", "litserve", "triton-http", "fastapi", "litserve", "triton-http"],
    "concurrency": [1, 1, 1, 16, 16, 16],
    "throughput_img_s": [19.0, 18.0, 18.5, 24.0, 26.0, 28.0],
    "latency_p50_ms": [52.0, 55.0, 53.0, 600.0, 590.0, 560.0],
})


def test_best_choice():
    at16 = {"concurrency": 16}
    assert checks.best_choice("triton-http", BACKENDS, key="backend", metric="throughput_img_s", at=at16, exercise="t").passed
    assert checks.best_choice("fastapi", BACKENDS, key="backend", metric="latency_p50_ms", mode="min",
                              at={"concurrency": 1}, exercise="t").passed
    r = checks.best_choice("fastapi", BACKENDS, key="backend", metric="throughput_img_s", at=at16, exercise="t")
    assert r.status == FAIL and "triton" not in r.message  # best at c=1 is not best at c=16
    batches = pd.DataFrame({"batch": [1, 4, 16], "throughput_img_s": [18.0, 27.0, 30.0]})
    assert checks.best_choice(16, batches, key="batch", metric="throughput_img_s", exercise="t").passed
    assert not checks.best_choice(4, batches, key="batch", metric="throughput_img_s", exercise="t").passed
    assert checks.best_choice(4, batches, key="batch", metric="throughput_img_s", rel_tol=0.15, exercise="t").passed


def _windows(name, values, **kw):
    return {"server": name, "throughput_img_s": sum(values) / len(values), "window_throughput_img_s": values, **kw}


CLOSE = pd.DataFrame([_windows("fastapi", [20.0, 23.0, 21.0]), _windows("triton-http", [22.0, 24.0, 23.5])])


APART = pd.DataFrame([_windows("fastapi", [20.0, 21.0, 20.5]), _windows("triton-http", [26.0, 27.0, 26.5])])


def test_best_choice_treats_overlapping_bands_as_ties():
    kw = dict(key="server", metric="throughput_img_s", exercise="t")
    assert checks.best_choice("fastapi", CLOSE, **kw).passed  # lower mean, but inside triton's band
    assert "tied" in checks.best_choice("fastapi", CLOSE, **kw).message
    r = checks.best_choice("fastapi", APART, **kw)
    assert r.status == FAIL and "beyond the measured spread and this run's 10 % margin" in r.message
    assert checks.best_choice("triton-http", APART, **kw).passed


def test_best_choice_reads_pairs_measured_together_by_their_alternating_windows():
    """06a's check once called fastapi "tied" with two servers, read apart with a drift margin of 114 %, while the
    answer under it ranked fastapi ahead of both in alternating windows, every pair past the margin."""
    kw = dict(key="server", metric="throughput_img_s", exercise="t")
    together = {"kind": "ab", "a": "triton-http", "b": "fastapi", "ratio": 1.2, "ratio_min": 1.15, "ratio_max": 1.25,
                "repeats": 3, "stable": True}
    assert checks.best_choice("fastapi", CLOSE, **kw).passed, "apart, the bands overlap: a tie"
    r = checks.best_choice("fastapi", CLOSE, pairs=[together], **kw)
    assert r.status == FAIL and "in alternating windows triton-http ahead by 20 %" in r.message
    assert "the highest" in checks.best_choice("triton-http", CLOSE, pairs=[together], **kw).message
    swapped = {**together, "a": "fastapi", "b": "triton-http", "ratio": 1 / 1.2, "ratio_min": 1 / 1.25,
               "ratio_max": 1 / 1.15}
    assert checks.best_choice("fastapi", CLOSE, pairs=[swapped], **kw).status == FAIL, "either orientation"
    table_first = {**together, "a": "fastapi", "b": "triton-http"}  # windows rank fastapi, the table triton-http
    r = checks.best_choice("triton-http", CLOSE, pairs=[table_first], **kw)
    assert r.passed and "the windows hold, so server fastapi is the better answer" in r.message
    unsure = {**together, "ratio_min": 0.95}  # pairs on both sides of 1: the windows tie them too
    assert "tied" in checks.best_choice("fastapi", CLOSE, pairs=[unsure], **kw).message


PROTOCOLS = pd.DataFrame({"protocol": ["http", "grpc", "http", "grpc"], "batch": [1, 1, 8, 8],
                          "throughput_img_s": [18.0, 19.8, 24.0, 30.0]})


def test_speedup():
    kw = dict(key="protocol", fast="grpc", slow="http", at={"batch": 8}, exercise="t")
    assert checks.speedup(1.25, PROTOCOLS, **kw).passed
    assert checks.speedup(lambda t: 30 / 24, PROTOCOLS, **kw).passed
    for wrong, why in [(0.8, "wrong way round"), (25.0, "not a percentage"), (1.1, "does not match")]:
        r = checks.speedup(wrong, PROTOCOLS, **kw)
        assert r.status == FAIL and why in r.message, r.message
    # latency: lower is better, so the ratio is slow/fast
    lat = PROTOCOLS.assign(latency_p50_ms=[50.0, 40.0, 300.0, 240.0])
    assert checks.speedup(1.25, lat, key="protocol", fast="grpc", slow="http", metric="latency_p50_ms",
                          higher_is_better=False, at={"batch": 8}, exercise="t").passed


HOP = pd.DataFrame({"server": ["in-process", "fastapi", "in-process", "fastapi"], "batch": [1, 1, 4, 4],
                    "latency_p50_ms": [42.0, 49.5, 150.0, 171.0]})


def test_difference():
    kw = dict(key="server", a="fastapi", b="in-process", at={"batch": 1}, exercise="t")
    assert checks.difference(7.5, HOP, **kw).passed
    assert checks.difference(lambda t: 49.5 - 42.0, HOP, **kw).passed
    for wrong, why in [(-7.5, "sign is reversed"), (49.5 / 42.0, "ratio"), (21.0, "does not match")]:
        r = checks.difference(wrong, HOP, **kw)
        assert r.status == FAIL and why in r.message and "7.5" not in r.message, r.message


BREAKDOWN = pd.DataFrame({"concurrency": [1, 4], "client_mean_ms": [60.0, 200.0], "server_request_ms": [45.0, 170.0],
                          "outside_server_ms": [15.0, 30.0]})


def test_share():
    kw = dict(part="outside_server_ms", whole="client_mean_ms", at={"concurrency": 4}, exercise="t")
    assert checks.share(0.15, BREAKDOWN, **kw).passed
    assert checks.share(lambda t: 30 / 200, BREAKDOWN, **kw).passed
    for wrong, why in [(15.0, "percentage"), (0.85, "the rest"), (200 / 30, "upside down"), (0.25, "does not match")]:
        r = checks.share(wrong, BREAKDOWN, **kw)
        assert r.status == FAIL and why in r.message and "0.15" not in r.message, r.message


SCALING = pd.DataFrame({"instances": [1, 2, 4], "throughput_img_s": [20.0, 36.0, 56.0]})


EFF = {1: 1.0, 2: 0.9, 4: 0.7}


def test_scaling_efficiency():
    assert checks.scaling_efficiency(EFF, SCALING, exercise="t").passed
    assert checks.scaling_efficiency([1.0, 0.9, 0.7], SCALING, exercise="t").passed
    def efficiency(t):
        s = t.set_index("instances")["throughput_img_s"]
        return s / (s.index * s.iloc[0])

    assert checks.scaling_efficiency(efficiency, SCALING, exercise="t").passed
    assert checks.scaling_efficiency(pd.DataFrame({"instances": [1, 2, 4], "efficiency": [1.0, 0.9, 0.7]}),
                                     SCALING, exercise="t").passed
    for wrong, why in [
        ({1: 1.0, 2: 1.8, 4: 2.8}, "speed-up"),              # speed-up, not efficiency
        ({1: 100.0, 2: 90.0, 4: 70.0}, "percentage"),
        ({1: 1.0, 2: 0.9}, "no efficiency"),
        ({1: 1.0, 2: 0.95, 4: 0.7}, "does not match"),
    ]:
        r = checks.scaling_efficiency(wrong, SCALING, exercise="t")
        assert r.status == FAIL and why in r.message, r.message


EVAL = pd.DataFrame({"threshold": [0.80, 0.85, 0.90, 0.95, 0.98],
                     "precision": [0.62, 0.81, 0.93, 0.97, 1.00],
                     "recall": [1.00, 0.98, 0.91, 0.80, 0.55]})


def test_threshold_for_precision():
    assert checks.threshold_for_precision(0.90, EVAL, target_precision=0.9, exercise="t").passed
    assert checks.threshold_for_precision(None, EVAL, target_precision=1.01, exercise="t").passed
    for wrong, why in [(0.98, "higher recall"), (0.85, "below the"), (0.92, "not a threshold")]:
        r = checks.threshold_for_precision(wrong, EVAL, target_precision=0.9, exercise="t")
        assert r.status == FAIL and why in r.message and "0.9 " not in r.message.replace("0.9 target", ""), r.message


def test_threshold_from_dedup_metrics_rows():
    rows = [{"method": "md5", "setting": "equal", "precision": 1.0, "recall": 0.2}]
    rows += [{"method": "phash", "setting": f"distance <= {d}", "precision": 0.99, "recall": 0.99} for d in (4, 8)]
    rows += [{"method": "embedding", "setting": f"cosine >= {t:.2f}", "precision": p, "recall": r}
             for t, p, r in zip(EVAL.threshold, EVAL.precision, EVAL.recall, strict=True)]
    assert checks.threshold_for_precision(0.9, rows, target_precision=0.9, exercise="t").passed
    assert not checks.threshold_for_precision(0.95, rows, target_precision=0.9, exercise="t").passed


def test_queue_delay_that_leads_by_less_than_the_runs_margin_is_named_a_tie():
    """A lesson once passed 4000 µs as "the best throughput within budget" where its own alternating windows
    called 4000 µs and 0 µs indistinguishable: the best's message names the delays the run does not rank below."""
    r = checks.queue_delay_for_budget(2000, _apart(27.2), 250.0, exercise="t")  # 0 µs 7 % behind: not ranked
    assert r.passed and "tied with 0 µs" in r.message
    r = checks.queue_delay_for_budget(2000, _apart(25.0), 250.0, exercise="t")  # 16 % behind: ranked below
    assert r.passed and "tied" not in r.message
