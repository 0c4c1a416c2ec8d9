"""No sentence of a lesson's static prose states a figure or a direction about the machine it runs on: those are
computed from the run, or quote a named source (servelab.lab.prose; the convention is in notebooks/SOURCES.md).
Held here over the jupytext sources; tests/notebooks/test_lab_run.py holds it over the notebooks the smoke run
executed (the smoke run's tests live in that one file)."""

from __future__ import annotations

import pytest

from servelab.lab import notebooks as nbs
from servelab.lab.prose import claims, notebook_claims

pytestmark = pytest.mark.notebooks

# being rewritten: their prose still states figures of earlier runs; each leaves this set when it passes
PENDING: set[str] = set()


def held(paths):
    return [p for p in paths if nbs.notebook_id(p) not in PENDING]


def test_pending_lessons_exist():
    assert PENDING <= {nbs.notebook_id(p) for p in nbs.discover()}


@pytest.mark.parametrize("py", held(nbs.discover()), ids=lambda p: p.stem)
def test_static_prose_states_nothing_about_this_machine(py):
    found = notebook_claims(py)
    assert not found, ("compute these from the run (step.versus / step.ratio / step.leader / grade) or quote a "
                       "named source (SOURCES.md, a reference/ path):\n" + "\n".join(map(str, found)))


def test_a_heading_that_gives_the_machine_a_direction_is_caught():
    """A lesson once headed a section with a direction about its own two-core machine that its run then
    contradicted (it measured a clear gain): headings are prose, and "a two-core CPU" is this machine."""
    md = "### Why, on a two-core CPU, PyTorch gains from a batch and ONNX Runtime in Triton hardly does\n\nSee below."
    assert [c.sentence for c in claims(md)] == [
        "Why, on a two-core CPU, PyTorch gains from a batch and ONNX Runtime in Triton hardly does"]
    assert not claims("### Why a batch can gain on a GPU\n\nSee below."), "no machine named: a general statement"
