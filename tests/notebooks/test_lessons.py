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
    assert "SOURCES.md" in md, "the comparison with the published write-ups"
    cited = re.findall(r"`(reference/[\w./-]*)`", md)
    assert cited, "the repository's own GPU results, cited as a `reference/...` path"
    root = py.parent.parent
    assert all((root / path).exists() for path in cited), f"cited reference paths exist: {cited}"
    assert not re.search(r"\.\./shared|/work/shared", text), "no reference to documents outside the repository"


def test_sources_page_names_the_hardware():
    sources = (nbs.discover()[0].parent / "SOURCES.md").read_text()
    for hardware in ("RTX A4000", "A100", "RTX 4080", "P100"):
        assert hardware in sources


def first_markdown(py) -> str:
    cells = re.split(r"^# %%", py.read_text(), flags=re.M)
    return next(c for c in cells if c.lstrip().startswith("[markdown]"))


@pytest.mark.parametrize("py", nbs.discover(), ids=lambda p: p.stem)
def test_lesson_links_the_troubleshooting_page(py):
    assert "](../docs/TROUBLESHOOTING.md)" in first_markdown(py), "a student who gets stuck finds the fixes from the top"
    assert (py.parent.parent / "docs" / "TROUBLESHOOTING.md").is_file()


def lesson(name: str) -> str:
    return next(p for p in nbs.discover() if p.stem.startswith(name)).read_text()


def test_replica_estimate_counts_what_a_node_holds():
    text = lesson("08_")
    assert "replica_plan(" in text and "allocatable" in markdown(next(p for p in nbs.discover() if p.stem.startswith("08_")))


def test_tensorrt_rebuilds_are_described_as_the_ep_does_them():
    text = lesson("05b_")
    assert "one per batch size the batcher forms" not in text, "the EP rebuilds when a shape leaves the range seen, not per size"
    assert ".profile" in text and "trt_engine_cache_enable" in text
    assert "no engine could be built here" in text, "say what runs where: no engine is built off the GPU node"


def test_grpc_lesson_says_what_this_run_shows_about_the_link():
    text = lesson("07_")
    assert "reproduce the 1.4–1.7×" in text, "the source's figure is set against what this run shows"
    assert "payload_bytes_per_request" in text and "framing" in text
    assert 'for r in ab_batch + ab_conc if r["kind"] == "ab"}.values()' in text, "each configuration once in the headline"


def test_capstone_is_a_job_chosen_by_the_run_and_measured_against_a_baseline():
    text = lesson("09_")
    assert "grouping_quality(" in text and "served embeddings alone" in text
    assert "capstone.choose(step.run.records" in text, "the serving choices come from this run's records"
    assert "capstone.timed_job(" in text and "job_photos" in text, "the job is timed stage by stage on many photos"
    assert "capstone.pace_ab(" in text and "step.ratio(pace" in text, "what the choice changed is a ratio of this run"


@pytest.mark.parametrize("py", nbs.discover(), ids=lambda p: p.stem)
def test_lesson_links_the_page_that_says_how_a_measurement_is_read(py):
    assert "](../docs/METHOD.md)" in first_markdown(py), "windows, drift and interleaving are explained once, there"
    assert (py.parent.parent / "docs" / "METHOD.md").is_file()


def test_three_way_verdict_is_the_alternating_windows_and_its_ceiling_is_measured_beside_them():
    """A run once read fastapi and LitServe as "indistinguishable" from points of two comparisons taken minutes
    apart, beside an interleaved 1.14× lead, and called a tensor point of notebook 04 (a slower moment of the host)
    "the ceiling for a server running one session" while a one-session server delivered 260 % of it."""
    text, md = lesson("06a_"), markdown(next(p for p in nbs.discover() if p.stem.startswith("06a_")))
    assert "the shared ONNX Runtime compute sets the pace" not in text, "a mechanism the run did not measure"
    assert "never measured together" in text, "a pair read apart across comparisons says so"
    assert 'experiment="06a-ceiling"' in text, "the one-session figure is measured here, beside the JPEG servers"
    assert "the measured ceiling for a server running one session" not in text
    assert "Batching does not make images cheaper" not in md, "notebook 04 of the same run measured what it saves"


def test_a_reason_follows_the_direction_the_run_measured():
    """06b once closed a measured 1.24× gain of two one-thread copies with "the cores were already busy, so there
    was no room to add": a fixed reason after a computed ratio. Each reason is keyed on the ratio's reading."""
    text = lesson("06b_")
    assert '"the cores were already busy, so there was no room to add"}[ahead]' in text
    assert "this machine: 2 cores" not in text, "the diagram names no core count of its own"


def test_figures_that_do_not_move_with_the_host_are_not_graded_with_its_drift():
    """A run whose drift probes moved 2.7x had a margin of 114 % for figures measured apart. 06b graded Triton's batch
    of 2.5 against a group of 4 with it ("the groups stayed whole"); 06c called 222 against 142 computed images
    "about as many"; 07 called a link that added 74 % of the arithmetic "close to that arithmetic"."""
    text = lesson("06b_")
    assert "exact = step.margin(interleaved=True)" in text
    assert "margin=exact) is Grade.LOSS" in text and "margin=exact) is Grade.FLAT" in text
    assert "about as many images either way" not in lesson("06c_"), "a grade on a drift margin says it is one"
    grpc = lesson("07_")
    assert "elif step.margin() > step.margin(interleaved=True):" in grpc, "'close' only within the floor"
