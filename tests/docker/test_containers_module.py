"""servelab.deploy.containers on a real engine: timed builds, a service container timed from `docker run` to
alive, ready and Docker's `healthy`, and a compose healthcheck run inside it by hand."""

from __future__ import annotations

import os

import pytest

from servelab.deploy.containers import (
    DockerError,
    base_image,
    build_image,
    engine_version,
    exec_healthcheck,
    healthcheck_command,
    image_info,
    service_container,
)
from tests.docker.conftest import docker, http_get

READYZ_PROBE = """
healthcheck:
  test: ["CMD", "python", "-c", "import urllib.request as u; u.urlopen('http://127.0.0.1:8002/readyz', timeout=3)"]
  interval: 15s
  start_period: 60s
"""


def test_healthcheck_command_is_what_docker_runs():
    assert healthcheck_command(READYZ_PROBE)[:2] == ["python", "-c"]
    assert healthcheck_command({"test": ["CMD", "python", "/opt/servelab/docker/healthcheck.py"]}) == \
        ["python", "/opt/servelab/docker/healthcheck.py"]
    assert healthcheck_command('healthcheck: {test: ["CMD-SHELL", "exit 1"]}') == ["/bin/sh", "-c", "exit 1"]
    assert healthcheck_command({"test": "exit 0"}) == ["/bin/sh", "-c", "exit 0"]
    for wrong in ({"test": ["NONE"]}, {"test": ["python", "x.py"]}, {"interval": "5s"}, "healthcheck: [1, 2]"):
        with pytest.raises(ValueError, match="healthcheck test"):
            healthcheck_command(wrong)


def test_base_image_is_the_first_from(tmp_path):
    assert base_image("docker/Dockerfile").startswith("python:3.11")
    (tmp_path / "Dockerfile").write_text("# comment\nFROM --platform=linux/amd64 debian:12 AS base\nFROM base\n")
    assert base_image(tmp_path / "Dockerfile") == "debian:12"


def test_engine_version_asks_the_engine(engine, monkeypatch):
    assert engine_version() == engine
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")  # the CLI is there, no engine behind it
    assert engine_version() is None


def test_a_cached_build_changes_nothing_and_reports_size_and_standin(image):
    tag = image("servelab:cpu-0.1.0")
    before = image_info(tag)
    b = build_image(tag, "docker/Dockerfile")
    assert b.cached and b.kept and b.image_id == before["id"], "a rebuild from the layer cache made a new image"
    size = int(docker("image", "inspect", "-f", "{{.Size}}", tag).stdout)
    assert b.size_mb == round(size / 1e6, 1)
    env = docker("image", "inspect", "-f", "{{range .Config.Env}}{{println .}}{{end}}", tag).stdout
    assert (b.standin is not None) == ("SERVELAB_STANDIN=" in env)
    assert image_info(tag)["healthcheck"]["test"][-1].endswith("healthcheck.py")
    assert image_info(base_image("docker/Dockerfile"))["healthcheck"] is None  # a base without HEALTHCHECK reads too


def test_a_throwaway_cold_build_is_removed(image, tmp_path):
    base = image("servelab:cpu-0.1.0")
    (tmp_path / "Dockerfile").write_text(f"FROM {base}\nRUN echo rebuilt > /tmp/layer\n")
    tag = f"nb02-test-throwaway:{os.getpid()}"
    b = build_image(tag, str(tmp_path / "Dockerfile"), cached=False, keep=False, context=tmp_path)
    assert not b.cached and not b.kept and b.size_mb > 0 and b.standin == image_info(base)["standin"]
    assert docker("image", "inspect", tag, check=False).returncode != 0, "the throwaway image is still there"


def test_a_container_that_refuses_to_start_is_reported_with_its_log(image, tmp_path):
    tag = image("servelab:cpu-0.1.0")
    empty = tmp_path / "no-export"
    empty.mkdir()
    with service_container(tag, name=f"nb02-test-refuses-{os.getpid()}", models=empty) as c:
        with pytest.raises(DockerError, match="no ONNX export"):
            c.wait_started(timeout=60)
    assert docker("inspect", c.name, check=False).returncode != 0, "the container was not removed"


def test_the_service_container_answers_alive_then_ready_then_healthy(image, onnx_meta, settings):
    """/healthz answers while the model loads, a /readyz healthcheck run inside the container fails then and
    passes once ready, and Docker's own status turns healthy only at its next probe after that."""
    from servelab.deploy.containers import weights_env

    tag = image("servelab:cpu-0.1.0")
    # more warm-up batches keep the service alive-but-not-ready long enough to look at it
    env = {**weights_env(settings), "SERVELAB_WARMUP_ITERS": 8}
    with service_container(tag, name=f"nb02-test-start-{os.getpid()}", models=os.path.dirname(onnx_meta["path"]),
                           env=env) as c:
        start = c.wait_started(timeout=300, on_alive=lambda: exec_healthcheck(c.name, READYZ_PROBE))
        assert not start.ready_at_first_alive, "ready before it could be seen loading: raise SERVELAB_WARMUP_ITERS"
        assert 0 < start.run_s <= start.healthz_s < start.readyz_s <= start.healthy_s
        assert not start.during_loading.passed and "503" in start.during_loading.output
        assert exec_healthcheck(c.name, READYZ_PROBE).passed
        assert http_get(f"{c.url}/readyz")[0] == 200
        passed = [p["at_s"] for p in start.probes if p["exit_code"] == 0]
        assert passed and start.status_at_ready in ("starting", "healthy"), start.probes
        assert all(p["exit_code"] != 0 for p in start.probes if p["at_s"] < start.healthz_s - 1.0), start.probes
