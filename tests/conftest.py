"""Shared fixtures: the exported model, generated photos, and one real uvicorn service on a free loopback port.

`make test` runs the suite in three phases (scripts/run_tests.sh), chosen by SERVELAB_TEST_PHASE:

- `parallel`: everything except the ratio tests below, on two pytest-xdist workers (one per core: this phase keeps
  both busy), the Docker tests on one worker while the other runs the rest. The Docker tests stay together (their
  images are built once), and so do the shared smoke lab run and the tests that read it.
- `spare-cores`: the ratio tests on the emulated device (the ones that use `spare_cores`), on three workers (their
  servers are session fixtures, started once on each worker that needs them). The device waits instead of
  computing, so each test uses a fraction of a core: neighbours of the same kind leave it the spare CPU it needs,
  where the parallel phase's saturated cores would not.
- `quiet`: the tests that assert a ratio the machine's spare CPU itself moves (the ones that use
  `quiet_machine`), one at a time, with nothing else running.

Unset, a plain `pytest` runs everything in one process, as before."""

from __future__ import annotations

import os

import numpy as np
import pytest

from servelab.config import Settings
from servelab.data import encode, synthetic_photo


@pytest.fixture(scope="session")
def settings() -> Settings:
    return Settings.from_env()


@pytest.fixture(scope="session")
def onnx_meta(settings):
    from servelab.model.export import ensure_exported

    return ensure_exported(settings)


@pytest.fixture(scope="session")
def photos() -> list[bytes]:
    """Eight distinct JPEG 'photos' of mixed sizes and aspect ratios."""
    sizes = [(640, 480), (480, 640), (300, 300), (1024, 256), (200, 500), (800, 600), (320, 240), (257, 513)]
    return [encode(synthetic_photo(i, s)) for i, s in enumerate(sizes)]


@pytest.fixture(scope="session")
def local_embedder(onnx_meta, settings):
    from servelab.model.engines import make_embedder

    return make_embedder(settings, engine="onnx")


@pytest.fixture(scope="session")
def service(onnx_meta, tmp_path_factory):
    from servelab.service.process import ServiceProcess

    log = tmp_path_factory.mktemp("service") / "service.log"
    with ServiceProcess(env={"SERVELAB_MAX_IMAGES": "8", "SERVELAB_MAX_BYTES": str(2 * 1024 * 1024),
                             "SERVELAB_MAX_PIXELS": str(4_000_000), "SERVELAB_MAX_QUEUE": "256"},
                        log_path=log) as svc:
        yield svc


def cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = a / np.linalg.norm(a, axis=-1, keepdims=True)
    b = b / np.linalg.norm(b, axis=-1, keepdims=True)
    return (a * b).sum(-1)


PHASES = ("parallel", "spare-cores", "quiet")
# the fixture that puts a test in a phase of its own; every other test runs in the parallel phase
PHASE_FIXTURES = {"quiet_machine": "quiet", "spare_cores": "spare-cores"}
INSTRUCTOR_CHECK = "test_instructor_notebooks_passed_in_the_last_lab_run"  # grades the smoke lab run


def _phase() -> str | None:
    phase = os.environ.get("SERVELAB_TEST_PHASE") or None
    if phase not in (None, *PHASES):
        raise pytest.UsageError(f"SERVELAB_TEST_PHASE must be one of {', '.join(PHASES)} (or unset), got {phase!r}")
    return phase


def _xdist_worker() -> bool:
    return bool(os.environ.get("PYTEST_XDIST_WORKER"))


SMOKE_RUN_TESTS = "tests/notebooks/test_lab_run.py"  # the tests that use the `smoke_run` fixture


def _group(nodeid: str) -> str | None:
    """The worker group a test must share: the Docker tests (one image build per run), and the smoke lab run with
    every test that reads it (the run lives in that worker's temporary folder)."""
    if nodeid.startswith("tests/docker/"):
        return "docker"
    if nodeid.startswith(SMOKE_RUN_TESTS) or f"::{INSTRUCTOR_CHECK}" in nodeid:
        return "smoke-lab"
    return None


def pytest_xdist_make_scheduler(config, log):
    """Under xdist, each group goes to one worker whole and every other test to whichever worker is free, in the
    order collected. (xdist's own `--dist loadgroup` marks cannot be used: with pytest 9 its group suffix no longer
    reaches the node ids it schedules by.)"""
    from xdist.scheduler import LoadScopeScheduling

    class Grouped(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _group(nodeid) or nodeid

    return Grouped(config, log)


def _test_phase(item) -> str:
    names = getattr(item, "fixturenames", ())
    return next((phase for fixture, phase in PHASE_FIXTURES.items() if fixture in names), "parallel")


@pytest.hookimpl(trylast=True)  # after tests/assignments' hook has put the instructor check last
def pytest_collection_modifyitems(session, config, items):
    phase = _phase()
    if phase:
        keep, drop = [], []
        for i in items:
            (keep if _test_phase(i) == phase else drop).append(i)
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
    if not _xdist_worker():
        return
    # the two long groups first, so each starts at once on its own worker and the short tests fill in after
    # them; inside the smoke group the tests that wait for the run come before the check that grades it
    groups = {i.nodeid: _group(i.nodeid) for i in items}
    first = [i for i in items if groups[i.nodeid] == "docker"]
    smoke = [i for i in items if groups[i.nodeid] == "smoke-lab" and i.name != INSTRUCTOR_CHECK]
    smoke += [i for i in items if i.name == INSTRUCTOR_CHECK]
    items[:] = first + smoke + [i for i in items if not groups[i.nodeid]]
    if phase == "spare-cores":  # each file builds up from checks to its long ratios, so the long ones start first
        items.reverse()


def pytest_collection_finish(session):
    """Start the shared smoke lab run now when a collected test needs it (tests/notebooks/conftest.py): it then
    runs beside the tests collected before the notebook tests, instead of after them. Under xdist the worker
    that runs the smoke group starts it when the group begins, while the other worker runs the rest."""
    if _xdist_worker() or session.config.option.collectonly or not any("smoke_run" in getattr(i, "fixturenames", ())
                                                    for i in session.items):
        return
    from servelab.model.export import load_metadata

    if load_metadata(Settings.from_env()) is None:  # not exported yet: the session's export comes first
        return
    from tests.notebooks.conftest import start_smoke_lab

    start_smoke_lab(session.config._tmp_path_factory.mktemp("lab-results"), background=True)


@pytest.fixture
def spare_cores():
    """For a test whose ratios come from the emulated device's waits: no CPU-heavy neighbour (the background smoke
    lab, if it is still running, is stopped meanwhile), though another such test may run beside it."""
    from tests.notebooks.conftest import smoke_lab_paused

    with smoke_lab_paused():
        yield


@pytest.fixture
def quiet_machine():
    """For a test that asserts a ratio the machine's spare CPU moves: the background smoke lab (if it is still
    running) is stopped meanwhile."""
    from tests.notebooks.conftest import smoke_lab_paused

    with smoke_lab_paused():
        yield


def pytest_sessionfinish(session, exitstatus):
    from tests.notebooks.conftest import stop_smoke_lab

    stop_smoke_lab()
