"""The any-OS path: the CPU lab container (docker/Dockerfile.lab, docker/compose.lab.yaml) runs the whole smoke lab
and opens a JupyterLab that answers, exactly as the README tells a macOS or Windows user to run it."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from servelab.lab.notebooks import discover
from tests.docker.conftest import REPO_ROOT, docker, http_get, wait_for

COMPOSE = ["compose", "-p", f"servelab-test-lab-{os.getpid()}", "-f", "docker/compose.lab.yaml"]


def _env() -> dict:
    # the README's Linux advice: run as yourself, so the files the lab writes into the clone are yours
    return {**os.environ, "SERVELAB_UID": str(os.getuid()), "SERVELAB_GID": str(os.getgid())}


@pytest.mark.timeout(1800)  # the whole smoke lab, inside a container, on two cores
def test_the_lab_container_runs_every_notebook(image):
    image("servelab-lab:cpu-0.1.0")
    results = REPO_ROOT / "results" / f"pytest-lab-image-{os.getpid()}"
    try:
        out = docker(*COMPOSE, "run", "--rm", "lab", "servelab", "lab", "run", "--profile", "smoke",
                     "--run-id", "lab-image", "--results", str(results.relative_to(REPO_ROOT)), "--no-progress-bar",
                     timeout=1500, env=_env(), check=False)
        state = json.loads((results / "lab-image" / "run.json").read_text())
        failed = [n["id"] for n in state["notebooks"] if n["status"] != "ok"]
        assert out.returncode == 0 and not failed and len(state["notebooks"]) == len(discover()), \
            f"failed: {failed}\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}"
        env = json.loads((results / "lab-image" / "environment.json").read_text()) \
            if (results / "lab-image" / "environment.json").exists() else {}
        if env:  # the records say when the lab's image was built on a stand-in base
            assert ("standin" in env) == bool(docker("image", "inspect", "-f",
                                                       "{{range .Config.Env}}{{println .}}{{end}}",
                                                       "servelab-lab:cpu-0.1.0").stdout.count("SERVELAB_STANDIN="))
    finally:
        docker(*COMPOSE, "down", "--remove-orphans", env=_env(), check=False, timeout=120)
        shutil.rmtree(results, ignore_errors=True)


def test_the_lab_container_opens_a_jupyterlab_that_answers(image):
    image("servelab-lab:cpu-0.1.0")
    try:
        docker(*COMPOSE, "up", "-d", "--wait", "--no-build", "lab", timeout=300, env=_env())
        status, body = wait_for(lambda: (r := http_get("http://127.0.0.1:8888/api", timeout=3))[0] == 200 and r,
                                60, what="JupyterLab's /api")
        assert status == 200 and "version" in body
        logs = docker(*COMPOSE, "logs", "lab", env=_env()).stdout + docker(*COMPOSE, "logs", "lab", env=_env()).stderr
        assert "http://127.0.0.1:8888/lab?token=" in logs  # the URL the README tells the user to open
    finally:
        docker(*COMPOSE, "down", "--remove-orphans", env=_env(), check=False, timeout=120)
