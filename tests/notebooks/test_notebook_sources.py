"""Notebook sources: .py and .ipynb in sync (no outputs committed), parameters cells, and shell commands that
say where they run."""

from __future__ import annotations

import re

import pytest

from servelab.lab import notebooks as nbs

pytestmark = pytest.mark.notebooks


def test_py_sources_and_ipynb_in_sync():
    assert nbs.out_of_sync() == [], "run `servelab lab sync`"


def test_sync_is_stable(tmp_path):
    import shutil

    for py in nbs.discover()[:2]:
        shutil.copy(py, tmp_path / py.name)
    copies = nbs.discover(tmp_path)
    nbs.sync(copies)
    first = [nbs.ipynb_for(p).read_bytes() for p in copies]
    nbs.sync(copies)
    assert first == [nbs.ipynb_for(p).read_bytes() for p in copies]


def test_out_of_sync_is_detected(tmp_path):
    import shutil

    py = nbs.discover()[0]
    shutil.copy(py, tmp_path / py.name)
    copy = tmp_path / py.name
    assert nbs.out_of_sync([copy]) == [f"{copy.stem}.ipynb (missing)"]
    nbs.sync([copy])
    assert nbs.out_of_sync([copy]) == []
    copy.write_text(copy.read_text() + "\n# %%\nprint('an edit')\n")
    assert nbs.out_of_sync([copy]) == [f"{copy.stem}.ipynb (differs from {copy.name})"]


@pytest.mark.parametrize("py", nbs.discover(), ids=lambda p: p.stem)
def test_parameters_cell(py):
    declared = nbs.declared_parameters(nbs.ipynb_for(py))
    assert {"place", "out_dir"} <= declared


@pytest.mark.parametrize("py", nbs.discover(), ids=lambda p: p.stem)
def test_shell_commands_say_where_they_run(py):
    text = py.read_text()
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        assert block.lstrip("# \n").startswith("runs") or "# runs here" in block or "# runs on the GPU node" in block, block
    for call in re.findall(r"show_commands\((\"\w+\")", text):
        assert call in ('"node"', '"here"', '"gpu"'), call


@pytest.mark.parametrize("py", nbs.discover(), ids=lambda p: p.stem)
def test_what_this_run_shows_is_computed(py):
    text = py.read_text()
    assert re.search(r"step\.shows\(\s*f[\"']", text), "the 'what this run shows' paragraph must be built from this run's numbers"


@pytest.mark.parametrize("py", nbs.discover(), ids=lambda p: p.stem)
def test_node_commands_need_no_root_and_no_engine_internals(py):
    """A node command reads a volume through its container (`docker compose … exec`), not through Docker's
    data root: /var/lib/docker is root-only and lays volumes out as the engine chooses."""
    commands = " ".join(re.findall(r"show_commands\(\"node\",(.*?)\)\n", py.read_text(), re.S))
    assert "/var/lib/docker" not in commands


def test_hardware_sentences_follow_the_server_not_the_place():
    """04 and 06b say what Triton computed on from the server's own report (the GPUs its loaded config names),
    so a node run never reads 'these two cores', and a one-GPU node says multi-GPU scaling was not run."""
    t04 = nbs.discover()[0].parent.joinpath("04_triton_dynamic_batching.py").read_text()
    t06b = nbs.discover()[0].parent.joinpath("06b_scaling.py").read_text()
    assert "these two cores" not in t04 and "triton.gpus" in t04
    assert "gpus_seen < 2" in t06b and 'if place != "node":\n    step.not_run("multi-GPU' not in t06b
