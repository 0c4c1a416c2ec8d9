"""One smoke lab run shared by every notebook test: the real `servelab lab run --profile smoke` CLI, with the
embedded stack on free loopback ports, into a temporary results folder. Starting the stack once for all
notebooks keeps this part of the suite within a few minutes on 2 cores.

Run sequentially, the suite starts it as soon as collection finds a test that needs it (tests/conftest.py), in
the background and at a lower priority, so it takes the CPU the earlier tests leave idle (server start-ups,
emulated devices that wait); the notebook tests, collected late, wait for it to finish. Under pytest-xdist the
worker that runs the smoke group starts it at normal priority: nothing else runs on that worker, and the
instructor check grades its timed exercises (a p99 budget), which a run starved by the other worker's
container builds once failed. Its numbers are not results either way."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from servelab.config import CHECKOUT as REPO_ROOT  # the tests run from a clone

RUN_ID = "pytest-smoke"
LIMIT_S = 1500  # from its start: it shares the CPU with the rest of the suite
_lab: dict = {}


def start_smoke_lab(results, *, background: bool) -> None:
    """Start the shared smoke run into `results` (once), its output in files beside it; niced when it runs in
    the background beside other tests."""
    if _lab:
        return
    cmd = ["nice", "-n", "10" if background else "0", sys.executable, "-m", "servelab.cli", "lab", "run",
           "--profile", "smoke", "--run-id", RUN_ID, "--ports", "free", "--results", str(results), "--no-progress-bar"]
    out, err = open(results / "lab.stdout", "w"), open(results / "lab.stderr", "w")
    _lab.update(results=results, started=time.monotonic(),
                proc=subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=out, stderr=err, start_new_session=True))
    out.close()
    err.close()


def _is_triton(p: psutil.Process) -> bool:
    try:
        return any("triton" in os.path.basename(x) for x in (p.name(), *(p.cmdline()[:1])))
    except psutil.Error:
        return False


@contextlib.contextmanager
def smoke_lab_paused():
    """The background smoke run and what it started, stopped (SIGSTOP) for a test whose assertion is a ratio the
    machine's spare CPU moves (a server busy while idle, emulated devices that need their clients served on
    time), and continued after. Its numbers are not results; its timeouts are minutes. Triton and its
    python-backend stubs are left running: stopped in the middle of an execution, the stub's interprocess lock
    times out and tritonserver aborts (seen); with the notebook's kernel stopped they finish it and idle."""
    proc = _lab.get("proc")
    family = []
    if proc is not None and proc.poll() is None:
        try:
            root = psutil.Process(proc.pid)
            family = [p for p in (root, *root.children(recursive=True)) if not _is_triton(p)]
        except psutil.Error:
            family = []
    for p in family:
        with contextlib.suppress(psutil.Error):
            p.suspend()
    try:
        yield
    finally:
        for p in family:
            with contextlib.suppress(psutil.Error):
                p.resume()


def stop_smoke_lab() -> None:
    """A run the session no longer waits for (interrupted, or its tests deselected after all) is stopped."""
    proc = _lab.get("proc")
    if proc is not None and proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


@pytest.fixture(scope="session")
def smoke_run(tmp_path_factory) -> dict:
    if not _lab:  # no hook started it (a single notebook test, say): start it now and wait
        start_smoke_lab(tmp_path_factory.mktemp("lab-results"), background=False)
    proc, results = _lab["proc"], _lab["results"]
    try:
        proc.wait(timeout=max(60.0, LIMIT_S - (time.monotonic() - _lab["started"])))
    except subprocess.TimeoutExpired:
        stop_smoke_lab()
        pytest.fail(f"the smoke lab run took more than {LIMIT_S} s")
    done = subprocess.CompletedProcess(proc.args, proc.returncode, (results / "lab.stdout").read_text(),
                                       (results / "lab.stderr").read_text())
    run_dir = results / RUN_ID
    info = {"proc": done, "dir": run_dir,
            "state": json.loads((run_dir / "run.json").read_text()) if (run_dir / "run.json").exists() else {}}
    assert done.returncode == 0, f"lab run failed (exit {done.returncode}):\n{done.stderr[-3000:]}"
    return info


def lab_cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "servelab.cli", "lab", *args], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=timeout)
