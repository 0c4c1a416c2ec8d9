"""The shared smoke run starts in the background (tests/conftest.py) and is paused for the tests whose ratios
the machine's spare CPU moves: the pause must reach every process it started, and let them go again."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import psutil

from tests.notebooks import conftest as lab


def _settle(family, ok, within_s: float = 3.0) -> bool:
    """Signals arrive asynchronously: wait (briefly) for the states to become what `ok` wants."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if ok({p.status() for p in family}):
            return True
        time.sleep(0.05)
    return False


def test_a_paused_background_run_stops_its_whole_family_and_resumes_it(monkeypatch):
    spin = "import subprocess, sys; c = subprocess.Popen([sys.executable, '-c', 'while True: pass']); c.wait()"
    proc = subprocess.Popen([sys.executable, "-c", spin], start_new_session=True)
    monkeypatch.setattr(lab, "_lab", {"proc": proc})
    try:
        for _ in range(50):  # the child is up
            if psutil.Process(proc.pid).children():
                break
            time.sleep(0.1)
        family = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
        assert len(family) == 2
        with lab.smoke_lab_paused():
            assert _settle(family, lambda states: states == {psutil.STATUS_STOPPED})
        assert _settle(family, lambda states: psutil.STATUS_STOPPED not in states)
    finally:
        lab.stop_smoke_lab()
    assert proc.poll() is not None


def test_triton_and_its_stubs_are_left_running(monkeypatch, tmp_path):
    """A tritonserver stopped mid-execution aborts (its python backend's lock times out): never paused."""
    fake = tmp_path / "tritonserver"
    fake.write_text(f"#!{sys.executable}\nwhile True: pass\n")
    fake.chmod(0o755)
    proc = subprocess.Popen([str(fake)], start_new_session=True)
    monkeypatch.setattr(lab, "_lab", {"proc": proc})
    try:
        with lab.smoke_lab_paused():
            time.sleep(0.3)
            assert psutil.Process(proc.pid).status() != psutil.STATUS_STOPPED
    finally:
        lab.stop_smoke_lab()


def test_every_test_that_reads_the_smoke_run_is_in_the_file_its_worker_group_names():
    """Under xdist the smoke run lives on the worker that runs tests/conftest.py's smoke group: a test elsewhere
    asking for `smoke_run` would start a second run on the other worker."""
    from tests.conftest import SMOKE_RUN_TESTS

    root = Path(__file__).resolve().parents[2]
    users = {str(p.relative_to(root)) for p in (root / "tests").rglob("test_*.py")
             if re.search(r"def test_\w+\([^)]*\bsmoke_run\b", p.read_text())}
    assert users == {SMOKE_RUN_TESTS}
