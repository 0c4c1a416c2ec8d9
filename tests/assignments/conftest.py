"""Run the check of the last lab run's instructor notebooks after everything else in the session, so that in a
full `pytest` it grades the smoke lab run tests/notebooks has just made (it sorts after tests/assignments)."""

from __future__ import annotations

import pytest

LAST = "test_instructor_notebooks_passed_in_the_last_lab_run"


def pytest_collection_modifyitems(session, config, items):
    last = [i for i in items if i.name == LAST]
    if last:
        items[:] = [i for i in items if i.name != LAST] + last


@pytest.fixture(scope="session")
def assignments_triton(onnx_meta, settings, tmp_path_factory):
    """A real embedded tritonserver serving the CPU encoder (1 instance), for the checks that apply an answer
    live; started only by the tests that ask for it."""
    from servelab.triton.models import CPU_ENCODER
    from servelab.triton.repository import stage
    from servelab.triton.server import EmbeddedTriton

    repo = tmp_path_factory.mktemp("assignments-triton") / "models"
    stage("cpu", repo, instances=1, max_delay_us=2000, settings=settings)
    with EmbeddedTriton(repo, log_path=repo.parent / "tritonserver.log", models=[CPU_ENCODER],
                        startup_timeout=240) as srv:
        yield srv


@pytest.fixture(scope="session")
def assignments_jpeg_triton(assignments_triton):
    """assignments_triton with the JPEG ensemble (and its preprocessing model) loaded beside the encoder."""
    from servelab.triton.control import load_model, model_states
    from servelab.triton.models import ENSEMBLE

    if model_states(assignments_triton.http_url).get(ENSEMBLE) != "READY":
        load_model(assignments_triton.http_url, ENSEMBLE)
    return assignments_triton


@pytest.fixture(scope="session")
def assignments_monitoring(service, tmp_path_factory):
    """A real Prometheus that scraped the real service during a short stepped load, still up: the view of
    servelab.bench.experiments.monitoring.monitoring, inside its block. Skipped where there is no prometheus."""
    from servelab.bench.experiments.monitoring import Target, monitoring, prometheus_binary
    from servelab.bench.load import client_factory
    from servelab.bench.load.inputs import sample_jpegs
    from servelab.client import InferenceClient

    if prometheus_binary() is None:
        pytest.skip("no prometheus on PATH (bash scripts/prometheus.sh installs it)")
    factory = client_factory(lambda: InferenceClient(mode="remote", backend="fastapi", url=service.url,
                                                     payload="jpeg", retries=0), blobs=list(sample_jpegs(1)))
    log = tmp_path_factory.mktemp("assignments-prometheus") / "prometheus.log"
    with monitoring([Target("servelab", service.url + "/metrics")], {"servelab": factory}, steps=(1, 2),
                    step_s=1.5, log_path=log) as view:
        assert view.prometheus_url, view.prometheus
        yield view
