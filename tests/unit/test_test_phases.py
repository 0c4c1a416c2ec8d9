"""`make test`'s phases (tests/conftest.py): every test runs in exactly one, chosen by the fixture it uses."""

from __future__ import annotations

import os
import subprocess
import sys

from servelab.config import CHECKOUT
from tests.conftest import PHASES

FILES = ["tests/bench/load/test_idle.py", "tests/triton/test_emulated.py", "tests/unit/test_batcher.py"]


def _collect(phase: str | None, *files: str) -> subprocess.CompletedProcess:
    """`pytest --collect-only` of `files` in `phase`, without the phase and xdist worker settings of the pytest
    running this test."""
    env = {k: v for k, v in os.environ.items() if k != "SERVELAB_TEST_PHASE" and not k.startswith("PYTEST_")}
    if phase:
        env["SERVELAB_TEST_PHASE"] = phase
    return subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *files],
                          cwd=CHECKOUT, env=env, capture_output=True, text=True, timeout=120)


def _collected(phase: str | None) -> set[str]:
    out = _collect(phase, *FILES)
    assert out.returncode == 0, out.stdout + out.stderr
    return {line for line in out.stdout.splitlines() if "::" in line}


def test_each_test_runs_in_exactly_one_phase_chosen_by_its_fixture():
    every = _collected(None)
    phases = {p: _collected(p) for p in PHASES}
    assert set().union(*phases.values()) == every
    assert sum(len(v) for v in phases.values()) == len(every)
    assert phases["quiet"] and all(t.startswith(FILES[0]) for t in phases["quiet"])  # the spare CPU itself
    assert phases["spare-cores"] and all(t.startswith(FILES[1]) for t in phases["spare-cores"])  # the emulated device
    assert phases["parallel"] and all(t.startswith(FILES[2]) for t in phases["parallel"])


def test_an_unknown_phase_is_refused():
    out = _collect("loud", FILES[2])
    assert out.returncode != 0 and "SERVELAB_TEST_PHASE must be one of parallel, spare-cores, quiet" in out.stdout + out.stderr
