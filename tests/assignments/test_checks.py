"""Each check accepts the solution and rejects plausible wrong answers, on synthetic tables shaped like this
lab's records; hints never contain the expected answer; unfinished exercises fail cleanly; strict mode raises."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from servelab.assignments import checks
from servelab.assignments.result import ERROR, FAIL, NOT_IMPLEMENTED, PASS, STRICT_ENV, ExerciseFailed


@pytest.fixture(autouse=True)
def _not_strict(monkeypatch):
    monkeypatch.delenv(STRICT_ENV, raising=False)


# queue delay × concurrency grid (as 04/05a tabulate it): 2000 µs is the best delay within 250 ms
GRID = pd.DataFrame({
    "queue_delay_us": [0, 0, 2000, 2000, 10000, 10000],
    "concurrency": [1, 8, 1, 8, 1, 8],
    "latency_p99_ms": [60.0, 230.0, 64.0, 240.0, 75.0, 320.0],
    "throughput_img_s": [18.0, 26.0, 17.5, 29.0, 16.0, 31.0],
})


def qd(answer, **kw):
    return checks.queue_delay_for_budget(answer, GRID, 250.0, exercise="t.1", **kw)


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


def test_function_answers_not_implemented_and_errors():
    def todo(grid, budget):
        raise NotImplementedError("exercise t.1: choose")

    assert qd(lambda g, b: 2000).status == PASS
    r = qd(todo)
    assert r.status == NOT_IMPLEMENTED and not r.passed
    r = qd(lambda g, b: g["no_such_column"])
    assert r.status == ERROR and "KeyError" in r.message


def test_strict_mode_raises_and_records(tmp_path, monkeypatch):
    class FakeStep:  # what a check uses of servelab.lab.step.Step
        id, out_dir = "04", tmp_path

    with pytest.raises(ExerciseFailed) as info:
        qd(0, strict=True, step=FakeStep())
    assert info.value.result.status == FAIL
    monkeypatch.setenv(STRICT_ENV, "1")
    with pytest.raises(ExerciseFailed):
        qd(0)
    assert qd(2000, step=FakeStep()).passed  # a pass never raises
    saved = json.loads((tmp_path / "assignments" / "04.json").read_text())
    assert saved["t.1"]["status"] == PASS and saved["t.1"]["notebook"] == "04"


GOOD_STANZA = """
dynamic_batching { preferred_batch_size: [ 4, 8 ] max_queue_delay_microseconds: 2000 }
instance_group [ { kind: KIND_CPU count: 2 } ]
"""


def stanza(text, **kw):
    kw = {"max_batch": 8, "count": 2, "max_delay_us": 2000, **kw}
    return checks.batching_stanza(text, exercise="t.2", **kw)


def test_batching_stanza_accepts_valid_config():
    assert stanza(GOOD_STANZA).status == PASS
    assert stanza(lambda mb: GOOD_STANZA).status == PASS


@pytest.mark.parametrize("wrong, why", [
    (GOOD_STANZA.replace("[ 4, 8 ]", "[ 4, 16 ]"), "outside 1..max_batch"),
    (GOOD_STANZA.replace("KIND_CPU", "KIND_GPU"), "KIND_CPU"),
    (GOOD_STANZA.replace("KIND_CPU", "CPU"), "would not load"),
    (GOOD_STANZA.replace("count: 2", "count: 1"), "asks for 2"),
    (GOOD_STANZA.replace("max_queue_delay_microseconds: 2000", ""), "0 or missing"),
    ("instance_group [ { kind: KIND_CPU count: 2 } ]", "no dynamic_batching"),
    ("max_batch_size: 16\n" + GOOD_STANZA, "max_batch_size 16"),
    ("", "empty"),
])
def test_batching_stanza_rejects(wrong, why):
    r = stanza(wrong)
    assert r.status == FAIL and why in r.message, r.message


GPU_GOOD = 'instance_group [ { kind: KIND_GPU count: 2 gpus: [ 0 ] }, { kind: KIND_GPU count: 2 gpus: [ 1 ] } ]'


def test_gpu_instance_group():
    ok = checks.gpu_instance_group(GPU_GOOD, gpus=[0, 1], per_gpu=2, exercise="t")
    assert ok.status == PASS
    assert checks.gpu_instance_group("instance_group [ { kind: KIND_GPU count: 2 gpus: [ 0, 1 ] } ]",
                                     gpus=[0, 1], per_gpu=2, exercise="t").passed
    for wrong, why in [
        ("instance_group [ { kind: KIND_GPU count: 4 } ]", "no `gpus` list"),       # count without gpus = per GPU
        ("instance_group [ { kind: KIND_GPU count: 2 gpus: [ 0 ] } ]", "no instance"),
        ("instance_group [ { kind: KIND_GPU count: 1 gpus: [ 0, 1 ] } ]", "asks for 2"),
        ("instance_group [ { kind: KIND_CPU count: 4 } ]", "KIND_GPU"),
    ]:
        r = checks.gpu_instance_group(wrong, gpus=[0, 1], per_gpu=2, exercise="t")
        assert r.status == FAIL and why in r.message, r.message


TRT_GOOD = """
optimization { execution_accelerators { gpu_execution_accelerator : [ {
  name : "tensorrt"
  parameters { key: "precision_mode" value: "FP16" }
  parameters { key: "trt_engine_cache_enable" value: "1" }
  parameters { key: "trt_engine_cache_path" value: "/trt_cache" }
  parameters { key: "trt_profile_min_shapes" value: "pixel_values:1x3x224x224" }
  parameters { key: "trt_profile_opt_shapes" value: "pixel_values:16x3x224x224" }
  parameters { key: "trt_profile_max_shapes" value: "pixel_values:64x3x224x224" }
} ] } }
"""


def test_trt_accelerator_stanza():
    kw = dict(max_batch=64, cache_path="/trt_cache", exercise="t")
    assert checks.trt_accelerator_stanza(TRT_GOOD, **kw).passed
    for wrong, why in [
        (TRT_GOOD.replace("pixel_values:64x", "pixel_values:32x"), "max batch is 32"),
        (TRT_GOOD.replace("pixel_values:1x", "pixel_values:8x"), "min batch is 8"),
        (TRT_GOOD.replace('"FP16"', '"FP32"'), "fp16"),
        (TRT_GOOD.replace('"/trt_cache"', '"/tmp/cache"'), "mounted"),
        (TRT_GOOD.replace('value: "1"', 'value: "0"'), "cache is off"),
    ]:
        r = checks.trt_accelerator_stanza(wrong, **kw)
        assert r.status == FAIL and why in r.message, r.message


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


def test_cost_per_1k_images():
    kw = dict(throughput_img_s=25.0, price_per_hour=0.9, exercise="t")
    assert checks.cost_per_1k_images(0.01, **kw).passed  # 0.9 / (25*3600) * 1000
    for wrong, why in [(36.0, "per hour"), (0.00001, "one image"), (0.02, "does not follow")]:
        r = checks.cost_per_1k_images(wrong, **kw)
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


def test_replicas_for_load():
    kw = dict(per_replica_img_s=25.0, target_img_s=200.0, utilisation=0.7, exercise="t")
    assert checks.replicas_for_load(12, **kw).passed  # 200 / 17.5 = 11.4 -> 12
    for wrong, why in [(8, "do not reach"), (11, "do not reach"), (13, "fewer"), (11.4, "whole number")]:
        r = checks.replicas_for_load(wrong, **kw)
        assert r.status == FAIL and why in r.message, r.message
    assert math.ceil(200 / 17.5) == 12


def test_execution_providers():
    good = ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"]
    assert checks.execution_providers(good, want="tensorrt", exercise="t").passed
    assert checks.execution_providers(good[1:], want="cuda", exercise="t").passed
    for wrong, why in [
        (list(reversed(good)), "first one"),
        (["TensorrtExecutionProvider", "CPUExecutionProvider"], "put CUDA"),
        (good[:2], "end with the CPU"),
        (["TensorRT", "CPUExecutionProvider"], "not ONNX Runtime provider names"),
        ("CUDAExecutionProvider", "list"),
    ]:
        r = checks.execution_providers(wrong, want="tensorrt" if "Tensor" in str(wrong) or wrong == list(reversed(good)) else "cuda", exercise="t")
        assert r.status == FAIL and why in r.message, (wrong, r.message)


PROBES = """
startupProbe: {httpGet: {path: /readyz, port: http}, periodSeconds: 5, failureThreshold: 12}
readinessProbe: {httpGet: {path: /readyz, port: http}, periodSeconds: 5}
livenessProbe: {httpGet: {path: /healthz, port: http}, periodSeconds: 10}
"""


def test_k8s_probes():
    assert checks.k8s_probes(PROBES, cold_start_s=20.0, exercise="t").passed  # 60 s >= 2 x 20 s
    for wrong, cold, why in [
        (PROBES, 40.0, "gives up after 60 s"),
        (PROBES.replace("livenessProbe: {httpGet: {path: /healthz", "livenessProbe: {httpGet: {path: /readyz"), 20.0, "only busy"),
        (PROBES.replace("readinessProbe: {httpGet: {path: /readyz", "readinessProbe: {httpGet: {path: /healthz"), 20.0, "readiness"),
        (PROBES.replace("startupProbe: {httpGet: {path: /readyz", "startupProbe: {httpGet: {path: /healthz"), 20.0,
         "passes while the model is still loading"),
        ("\n".join(PROBES.strip().splitlines()[1:]), 20.0, "no startupProbe"),
        ("startupProbe: [", 20.0, "not valid YAML"),
    ]:
        r = checks.k8s_probes(wrong, cold_start_s=cold, exercise="t")
        assert r.status == FAIL and why in r.message, r.message


HEALTH = """
healthcheck:
  test: ["CMD", "python", "-c", "import urllib.request as u; u.urlopen('http://127.0.0.1:8002/readyz', timeout=3)"]
  interval: 10s
  timeout: 3s
  retries: 3
  start_period: 1m
"""


def test_compose_healthcheck():
    assert checks.compose_healthcheck(HEALTH, cold_start_s=30.0, exercise="t").passed
    assert checks.compose_healthcheck(HEALTH.replace("1m", "45s"), cold_start_s=30.0, exercise="t").passed
    script = 'healthcheck: {test: ["CMD", "python", "/opt/servelab/docker/healthcheck.py"], start_period: 90s}'
    assert checks.compose_healthcheck(script, cold_start_s=30.0, exercise="t").passed
    for wrong, why in [
        (HEALTH.replace("1m", "20s"), "shorter than"),
        (HEALTH.replace("/readyz", "/"), "ready to serve"),
        (HEALTH.replace("/readyz", "/healthz"), "while the model is still loading"),
        (HEALTH.replace("8002", "8080"), "own port"),
        (HEALTH.replace("  start_period: 1m\n", ""), "no start_period"),
        (HEALTH.replace("1m", "soon"), "not a duration"),
        ('healthcheck: {test: ["CMD-SHELL", "curl -f http://127.0.0.1:8002/readyz"], start_period: 90s}', "no curl"),
        ('healthcheck: {test: ["python", "/opt/servelab/docker/healthcheck.py"], start_period: 90s}', "starts with"),
    ]:
        r = checks.compose_healthcheck(wrong, cold_start_s=30.0, exercise="t")
        assert r.status == FAIL and why in r.message, r.message


# --- measured spread: ties -----------------------------------------------------------------------------------

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


def test_best_choice_treats_overlapping_bands_as_ties():
    kw = dict(key="server", metric="throughput_img_s", exercise="t")
    assert checks.best_choice("fastapi", CLOSE, **kw).passed  # lower mean, but inside triton's band
    assert "tied" in checks.best_choice("fastapi", CLOSE, **kw).message
    r = checks.best_choice("fastapi", APART, **kw)
    assert r.status == FAIL and "outside the measured spread" in r.message
    assert checks.best_choice("triton-http", APART, **kw).passed


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


def test_queue_delay_within_the_spread_of_the_best_is_a_tie():
    windows = {0: [24.0, 28.0], 2000: [27.0, 31.0], 10000: [30.0, 32.0]}  # 0 µs overlaps 2000 µs's band
    grid = GRID.assign(window_throughput_img_s=[windows[d] if c == 8 else [t, t] for d, c, t in
                                                zip(GRID.queue_delay_us, GRID.concurrency, GRID.throughput_img_s,
                                                    strict=True)])
    assert checks.queue_delay_for_budget(0, grid, 250.0, exercise="t").passed
    assert not qd(0).passed  # without windows the same numbers are not a tie


# --- a check and the sentence under it read the same record the same way -------------------------------------------

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
    side = reading.side("fastapi", "triton-http", "tie")
    kw = dict(key="server", a="fastapi", b="triton-http", exercise="t")
    results = {answer: checks.outcome(answer, [fastapi, triton], **kw) for answer in ("fastapi", "triton-http", "tie")}
    assert [a for a, r in results.items() if r.passed] == [side]
    if side == "tie":
        assert "indistinguishable here" in sentence
    else:
        assert "indistinguishable" not in sentence  # never a tie in the sentence while the check names a side
        assert sentence.startswith("fastapi reached") and ("below" if side == "triton-http" else "above") in sentence
    if said:
        assert said in sentence
    if side != "tie":
        assert sentence.split(": ", 1)[-1] in results[side].message or reading.ranked  # the same words
    best = checks.best_choice(side if side != "tie" else "fastapi", [fastapi, triton], key="server",
                              metric="throughput_img_s", exercise="t")
    assert best.passed


def test_a_small_consistent_lead_is_named_by_the_check_with_its_size():
    fastapi, triton = _rec("fastapi", 20.0, 21.0), _rec("triton-http", 21.5, 23.0)
    r = checks.outcome("triton-http", [fastapi, triton], key="server", a="fastapi", b="triton-http", exercise="t")
    assert r.passed and "triton-http ahead of fastapi by 9 % in every window, below the 10 % margin" in r.message
    r = checks.outcome("tie", [fastapi, triton], key="server", a="fastapi", b="triton-http", exercise="t")
    assert r.status == FAIL and "even where it is small" in r.message
    r = checks.best_choice("triton-http", [fastapi, triton], key="server", metric="throughput_img_s", exercise="t")
    assert r.passed and "by 9 % in every window" in r.message
    assert not checks.best_choice("fastapi", [fastapi, triton], key="server", metric="throughput_img_s",
                                  exercise="t").passed


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
