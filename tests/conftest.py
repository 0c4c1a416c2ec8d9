"""Shared fixtures: the exported model, generated photos, and one real uvicorn service on a free loopback port."""

from __future__ import annotations

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


def pytest_collection_finish(session):
    """Start the shared smoke lab run now when a collected test needs it (tests/notebooks/conftest.py): it then
    runs beside the tests collected before the notebook tests, instead of after them."""
    if session.config.option.collectonly or not any("smoke_run" in getattr(i, "fixturenames", ())
                                                    for i in session.items):
        return
    from servelab.model.export import load_metadata

    if load_metadata(Settings.from_env()) is None:  # not exported yet: the session's export comes first
        return
    from tests.notebooks.conftest import start_smoke_lab

    start_smoke_lab(session.config._tmp_path_factory.mktemp("lab-results"))


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
