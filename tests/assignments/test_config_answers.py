"""Checks of text a student writes: config.pbtxt stanzas parsed as Triton's ModelConfig, Kubernetes probes and
compose healthchecks parsed as YAML, ONNX Runtime's providers list. Each accepts a valid answer and names the
rule a wrong one breaks."""

from __future__ import annotations

import pytest

from servelab.assignments import checks
from servelab.assignments.result import FAIL, PASS, STRICT_ENV


@pytest.fixture(autouse=True)
def _not_strict(monkeypatch):
    monkeypatch.delenv(STRICT_ENV, raising=False)


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


PA = dict(binary="build/perf_analyzer/perf_analyzer", model="enc", http_address="127.0.0.1:8003",
          grpc_address="127.0.0.1:8004", clients=8, requests=96)


PA_BIN = "build/perf_analyzer/perf_analyzer"
WINDOWS = "--measurement-mode count_windows --measurement-request-count 96 -s 999 --max-trials 3"
SHARE = "TRITON_CLIENT_GRPC_CHANNEL_MAX_SHARE_COUNT"


def perf_lines(**change):
    point = f"{PA_BIN} -m enc -b 1 --concurrency-range 8 {WINDOWS}"
    lines = {"http": f"{point} -i http -u 127.0.0.1:8003",
             "grpc": f"{SHARE}=1 {point} -i grpc -u 127.0.0.1:8004",
             "grpc shared": f"{SHARE}=16 {point} -u 127.0.0.1:8004 -i grpc"}
    return checks.perf_analyzer_lines({**lines, **change}, exercise="t.pa", **PA)


def test_perf_analyzer_lines_accepts_three_lines_of_one_point():
    assert perf_lines().status == PASS


@pytest.mark.parametrize("change, hint", [
    ({"grpc": f"{SHARE}=1 {PA_BIN} -m enc --concurrency-range 8 {WINDOWS} -i http -u 127.0.0.1:8004"},
     "should speak -i grpc"),
    ({"grpc": f"{PA_BIN} -m enc --concurrency-range 8 {WINDOWS} -i grpc -u 127.0.0.1:8004"}, "its own channel"),
    ({"grpc shared": f"{SHARE}=4 {PA_BIN} -m enc --concurrency-range 8 {WINDOWS} -i grpc -u 127.0.0.1:8004"},
     "at least 8"),
    ({"http": f"{PA_BIN} -m enc --concurrency-range 8 {WINDOWS} -i http -u 127.0.0.1:8004"},
     "listens at 127.0.0.1:8003"),
    ({"http": f"{PA_BIN} -m enc --concurrency-range 4 {WINDOWS} -i http -u 127.0.0.1:8003"}, "--concurrency-range 8"),
    ({"http": f"{PA_BIN} -m enc --concurrency-range 8 --request-count 96 -i http -u 127.0.0.1:8003"},
     "--measurement-mode"),
    ({"http": f"{PA_BIN} -m enc --concurrency-range 8 {WINDOWS} --request-count 96 -i http -u 127.0.0.1:8003"},
     "whole seconds"),
    ({"http": f"{PA_BIN} -m enc --concurrency-range 8 {WINDOWS.replace('-s 999', '-s 15')} -i http -u 127.0.0.1:8003"},
     "-s 15"),
    ({"http": f"{PA_BIN} -m enc --concurrency-range 8 {WINDOWS} -i http -u 127.0.0.1:8003 --async"},
     "different measurements"),
    ({"grpc shared": None}, "missing"),
])
def test_perf_analyzer_lines_names_what_a_wrong_line_breaks(change, hint):
    result = perf_lines(**change)
    assert result.status == FAIL and hint in result.message, result.message
