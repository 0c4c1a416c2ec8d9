"""Every notebook is a lesson: objectives, a diagram of what it measures, predict-first questions answered from
the run, the source material cited through notebooks/SOURCES.md (never a path outside the repository), and
the place where this repository's own GPU reference results will go."""

from __future__ import annotations

import re

import pytest

from servelab.lab import notebooks as nbs

pytestmark = pytest.mark.notebooks


def markdown(py) -> str:
    cells = re.split(r"^# %%", py.read_text(), flags=re.M)
    return "\n".join(c for c in cells if c.lstrip().startswith("[markdown]"))


@pytest.mark.parametrize("py", nbs.discover(), ids=lambda p: p.stem)
def test_lesson_structure(py):
    text, md = py.read_text(), markdown(py)
    assert "**After this notebook you can**" in md, "learning objectives at the top"
    assert "```mermaid" in md, "a diagram of what is measured"
    assert "Predict first" in md, "a question to answer before measuring"
    assert re.search(r"step\.answer\(", text), "the answer to the question, computed from this run's numbers"
    assert "SOURCES.md" in md and "`reference/`" in md, "source comparison and the repository's own GPU results"
    assert not re.search(r"\.\./shared|/work/shared", text), "no reference to documents outside the repository"


def test_sources_page_names_the_hardware():
    sources = (nbs.discover()[0].parent / "SOURCES.md").read_text()
    for hardware in ("RTX A4000", "A100", "RTX 4080", "P100"):
        assert hardware in sources
