"""One smoke lab run shared by every notebook test: the real `servelab lab run --profile smoke` CLI, with the
embedded stack on free loopback ports, into a temporary results folder. Starting the stack once for all
notebooks keeps this part of the suite within a few minutes on 2 cores."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from servelab.config import CHECKOUT as REPO_ROOT  # the tests run from a clone

RUN_ID = "pytest-smoke"


@pytest.fixture(scope="session")
def smoke_run(tmp_path_factory) -> dict:
    results = tmp_path_factory.mktemp("lab-results")
    cmd = [sys.executable, "-m", "servelab.cli", "lab", "run", "--profile", "smoke", "--run-id", RUN_ID,
           "--ports", "free", "--results", str(results), "--no-progress-bar"]
    proc = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=540)
    run_dir = results / RUN_ID
    info = {"proc": proc, "dir": run_dir,
            "state": json.loads((run_dir / "run.json").read_text()) if (run_dir / "run.json").exists() else {}}
    assert proc.returncode == 0, f"lab run failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}"
    return info


def lab_cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "servelab.cli", "lab", *args], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=timeout)
