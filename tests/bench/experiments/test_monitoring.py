"""The monitoring view: a real Prometheus (Debian's package, `scripts/prometheus.sh`) scraping a real uvicorn
service and a real tritonserver on loopback during a stepped load; the alert rule checked by promtool."""

from __future__ import annotations

import math
import subprocess

import numpy as np
import pytest

from servelab.bench.experiments.monitoring import (
    ALERT,
    Target,
    check_rules,
    monitor,
    plot_monitoring,
    prometheus_binary,
    promtool_binary,
    rules_yaml,
)
from tests.bench.conftest import DELAY_MS, TINY

needs_prometheus = pytest.mark.skipif(prometheus_binary() is None,
                                      reason="no prometheus on PATH (bash scripts/prometheus.sh installs it)")
needs_promtool = pytest.mark.skipif(promtool_binary() is None,
                                    reason="no promtool on PATH (bash scripts/prometheus.sh installs it)")


@needs_promtool
def test_alert_rule_passes_promtool_check(tmp_path):
    path = tmp_path / "rules.yml"
    path.write_text(rules_yaml(2.0))
    assert "SUCCESS" in check_rules(path)


@needs_promtool
def test_a_broken_rule_is_refused_with_promtools_reason(tmp_path):
    path = tmp_path / "rules.yml"
    path.write_text(rules_yaml(2.0).replace("sum(rate(", "sum(rate(("))
    with pytest.raises(ValueError, match="promtool refused"):
        check_rules(path)


@needs_promtool
def test_alert_fires_while_503s_are_counted_and_not_otherwise(tmp_path):
    """promtool's rule unit test: the alert fires while the 503 counter grows, and stays silent while only 200s do."""
    (tmp_path / "rules.yml").write_text(rules_yaml(2.0))
    (tmp_path / "test.yml").write_text(f"""
rule_files: [rules.yml]
evaluation_interval: 500ms
tests:
  - interval: 500ms
    input_series:
      - series: 'servelab_requests_total{{endpoint="/embed",status="503"}}'
        values: '0 0 0 0 0 0 5 10 15 20 20 20 20 20 20 20 20'
      - series: 'servelab_requests_total{{endpoint="/embed",status="200"}}'
        values: '0+3x16'
    alert_rule_test:
      - eval_time: 2s
        alertname: {ALERT}
        exp_alerts: []
      - eval_time: 4s
        alertname: {ALERT}
        exp_alerts:
          - exp_labels: {{severity: warning}}
            exp_annotations:
              summary: 'the service is refusing requests with 503 (past its in-flight limit)'
      - eval_time: 8s
        alertname: {ALERT}
        exp_alerts: []
""")
    res = subprocess.run([promtool_binary(), "test", "rules", "test.yml"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr


@pytest.fixture(scope="module")
def admitting_one(onnx_meta, tmp_path_factory):
    """A real service that admits one request at a time: a second client is refused with 503."""
    from servelab.service.process import ServiceProcess

    log = tmp_path_factory.mktemp("admitting-one") / "service.log"
    with ServiceProcess(env={"SERVELAB_MAX_IN_FLIGHT": "1", "SERVELAB_MAX_QUEUE": "8"}, log_path=log) as svc:
        yield svc


def _service_factory(url):
    from servelab.bench.load import client_factory
    from servelab.bench.load.inputs import sample_jpegs
    from servelab.client import InferenceClient

    return client_factory(lambda: InferenceClient(mode="remote", backend="fastapi", url=url, payload="jpeg", retries=0),
                          blobs=list(sample_jpegs(1)))


@needs_prometheus
@pytest.mark.triton
def test_prometheus_scrapes_service_and_triton_and_alerts_while_the_service_sheds(admitting_one, tiny_triton,
                                                                                  tiny_factory, tmp_path):
    targets = [Target("servelab", admitting_one.url + "/metrics"), Target("triton", tiny_triton.metrics_url)]
    view = monitor(targets, {"servelab": _service_factory(admitting_one.url), "triton": tiny_factory("http")},
                   triton_model=TINY, steps=(1, 3, 1), step_s=2.0, log_path=tmp_path / "prometheus.log")

    assert view.prometheus.startswith("Prometheus"), view.prometheus
    assert view.scraped
    p99 = view.peak("p99_ms")  # histogram_quantile over the service's own histogram, in ms
    assert p99 is not None and math.isfinite(p99) and p99 > 0
    assert view.peak("ok_rps") > 0
    # Triton's cumulative microsecond counters per request: its compute is the model's fixed sleep per execution
    compute = view.during("triton_compute_ms", 1)
    assert compute is not None and 0.8 * DELAY_MS <= compute <= 10 * DELAY_MS, compute
    assert view.peak("triton_queue_ms") is not None
    # one request is admitted at a time and three clients send: the service shed, and the alert fired after
    # the first refusal
    assert view.shed_span is not None
    assert view.alert_firing, f"no {ALERT} while the service shed {view.shed_span}"
    first_fire = view.alert_firing[0][0]
    assert view.shed_span[0] <= first_fire <= view.shed_span[1] + 3.0
    own = {r["step"]: r for r in view.steps if r["target"] == "servelab"}
    assert own[1]["ok_rps"] > 0 and own[2]["shed_rps"] > own[1]["shed_rps"], own
    assert plot_monitoring(view, tmp_path / "monitoring.png").stat().st_size > 0


@pytest.mark.triton
def test_without_prometheus_the_load_still_runs_and_says_why(tiny_triton, tiny_factory, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no prometheus binary to be found
    view = monitor([Target("triton", tiny_triton.metrics_url)], {"triton": tiny_factory("http")},
                   triton_model=TINY, steps=(1, 2), step_s=0.5)
    assert view.prometheus.startswith("no Prometheus") and not view.scraped
    assert [r["clients"] for r in view.steps] == [1, 2]
    assert all(r["ok_rps"] > 0 and r["failed"] == 0 for r in view.steps)
    assert np.isfinite(view.steps[-1]["accepted_p50_ms"])
    assert plot_monitoring(view, tmp_path / "monitoring.png").stat().st_size > 0


@needs_prometheus
def test_a_prometheus_left_running_stops_when_its_python_exits():
    """A notebook holds Prometheus across cells (`monitoring`'s block) and may fail before closing it: the kernel's
    exit stops it and removes its data directory."""
    import sys
    from pathlib import Path

    from servelab.managed_process import pid_alive

    code = ("from servelab.bench.experiments.monitoring import PrometheusServer, Target\n"
            "p = PrometheusServer([Target('nothing', 'http://127.0.0.1:9/metrics')]).start()\n"
            "print(p.proc.pid, p.dir, flush=True)\n")  # exits without stopping it
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    pid, data = res.stdout.split()
    assert not pid_alive(int(pid)), f"Prometheus {pid} outlived the Python that started it"
    assert not Path(data).exists()
