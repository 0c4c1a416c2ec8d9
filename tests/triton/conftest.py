"""One real embedded tritonserver for the whole session, on free loopback ports, serving a freshly staged
CPU repository (1 encoder instance, so the 2-core machine stays usable)."""

from __future__ import annotations

import pytest

from servelab.triton.repository import stage
from servelab.triton.server import EmbeddedTriton


@pytest.fixture(scope="session")
def triton_repo(onnx_meta, settings, tmp_path_factory):
    out = tmp_path_factory.mktemp("triton") / "models"
    stage("cpu", out, instances=1, max_delay_us=5000, settings=settings, uint8=True)
    return out


@pytest.fixture(scope="session")
def triton(triton_repo, tmp_path_factory):
    log = tmp_path_factory.mktemp("triton-log") / "tritonserver.log"
    with EmbeddedTriton(triton_repo, log_path=log, startup_timeout=240) as srv:
        yield srv


@pytest.fixture(scope="session")
def jpegs(photos) -> list[bytes]:
    return photos[:4]
