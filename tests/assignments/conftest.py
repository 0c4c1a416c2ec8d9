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
