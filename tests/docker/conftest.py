"""A real Docker engine: images built once per test session (on stand-in bases where no registry answers) and
containers started with the repository's own compose files. Every test here carries the `docker` marker and is
skipped, with the reason shown, where no engine answers (`make test` starts one when run as root)."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.error
import urllib.request

import pytest

from servelab.config import CHECKOUT as REPO_ROOT  # the tests run from a clone

IMAGES = {  # image tag -> (Dockerfile, build arguments)
    "servelab:cpu-0.1.0": ("docker/Dockerfile", {}),
    "servelab:gpu-0.1.0": ("docker/Dockerfile.gpu", {}),
    "servelab-triton:25.10-0.1.0": ("docker/Dockerfile.triton", {}),
    # PyTorch's CPU index cannot be reached here; pip finds the CPU torch the stand-in base carries
    "servelab-lab:cpu-0.1.0": ("docker/Dockerfile.lab", {"TORCH_INDEX_URL": ""}),
}


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/docker/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.docker)


def docker(*args: str, timeout: float = 600, check: bool = True, **kw) -> subprocess.CompletedProcess:
    out = subprocess.run(["docker", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout, **kw)
    if check and out.returncode != 0:
        raise AssertionError(f"docker {' '.join(args)} -> exit {out.returncode}\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    return out


@pytest.fixture(scope="session")
def engine() -> str:
    """The engine's version; skips the module where none answers or compose is missing."""
    if not shutil.which("docker"):
        pytest.skip("no docker CLI on this machine (make test installs an engine when run as root)")
    info = subprocess.run(["docker", "version", "-f", "{{.Server.Version}}"], capture_output=True, text=True, timeout=20)
    if info.returncode != 0:
        pytest.skip("no Docker engine answers (make test starts one when run as root: scripts/docker_engine.sh)")
    if subprocess.run(["docker", "compose", "version"], capture_output=True, timeout=20).returncode != 0:
        pytest.skip("the docker compose plugin is missing (scripts/docker_engine.sh installs it as root)")
    return info.stdout.strip()


@pytest.fixture(scope="session")
def standins(engine) -> str:
    """scripts/standin_images.sh: the real base images where a registry answers, labelled stand-ins where not."""
    out = subprocess.run(["bash", "scripts/standin_images.sh"], cwd=REPO_ROOT, capture_output=True, text=True,
                         timeout=900)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return out.stdout


@pytest.fixture(scope="session")
def image(standins):
    """image(tag) -> tag, built from its Dockerfile once per session."""
    built: dict[str, float] = {}

    def build(tag: str) -> str:
        if tag not in built:
            dockerfile, args = IMAGES[tag]
            flags = [x for k, v in args.items() for x in ("--build-arg", f"{k}={v}")]
            t0 = time.monotonic()
            docker("build", "-q", "-f", dockerfile, "-t", tag, *flags, ".", timeout=1500)
            built[tag] = time.monotonic() - t0
        return tag

    build.seconds = built
    return build


def http_get(url: str, timeout: float = 5) -> tuple[int, dict | str]:
    """(status, JSON body or text); status 0 with the reason when nothing answers yet (a container starting)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            body = resp.read().decode()
            status = resp.status
    except urllib.error.HTTPError as exc:
        body, status = exc.read().decode(), exc.code
    except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
        return 0, str(exc)
    try:
        return status, json.loads(body)
    except ValueError:
        return status, body


def wait_for(check, timeout: float, every: float = 0.5, what: str = "condition"):
    """Poll `check()` until it returns something truthy; that value, or AssertionError after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(every)
