"""Notebook sources: .py and .ipynb in sync (no outputs committed), parameters cells, and shell commands that
say where they run."""

from __future__ import annotations

import re

import pytest

from servelab.lab import notebooks as nbs

pytestmark = pytest.mark.notebooks


def _echoed_calls(py) -> list[str]:
    """Code cells whose last statement is a bare `step.table(...)` / `step.plot(...)`: Jupyter echoes the value it
    returns (the tagged frame, a path) under the table the call already displayed."""
    import ast

    import jupytext

    found = []
    for cell in jupytext.read(py).cells:
        if cell.cell_type != "code":
            continue
        body = ast.parse(cell.source).body
        last = body[-1] if body else None
        if (isinstance(last, ast.Expr) and isinstance(last.value, ast.Call)
                and isinstance(last.value.func, ast.Attribute) and last.value.func.attr in ("table", "plot")):
            found.append(cell.source.splitlines()[-1])
    return found


@pytest.mark.parametrize("py", nbs.discover(),
                         ids=lambda p: p.stem)
def test_no_table_is_shown_twice(py):
    """03 and 05b once printed each table twice, the second time with the hardware/versions tag columns."""
    assert not _echoed_calls(py), "assign the value step.table / step.plot returns, or Jupyter prints it again"



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


MAX_SOURCE_LINES = 550
MAX_PARAMETER_LINES = 8
# lessons still over the line budget, at most their present length: they may shrink, never grow
OVER_BUDGET: dict[str, int] = {}


def parameters_cell(py) -> list[str]:
    text = py.read_text()
    start = text.index('# %% tags=["parameters"]\n') + len('# %% tags=["parameters"]\n')
    end = text.index("\n# %%", start)
    return [ln for ln in text[start:end].splitlines() if ln.strip()]


@pytest.mark.parametrize("py", nbs.discover(), ids=lambda p: p.stem)
def test_parameters_cell_holds_the_harness_and_a_few_knobs(py):
    from servelab.lab.session import ENDPOINT_KEYS, HARNESS

    declared = nbs.declared_parameters(nbs.ipynb_for(py))
    assert HARNESS in declared, "declare `harness = {}`: where the lesson runs comes from the runner"
    own = declared & {"place", "out_dir", "load", *ENDPOINT_KEYS, "service_pid", "triton_pid", "triton_repository"}
    assert not own, f"{sorted(own)}: the harness gives these (lab.<name>), the notebook does not declare them"
    lines = parameters_cell(py)
    assert len(lines) <= MAX_PARAMETER_LINES, f"parameters cell of {len(lines)} lines: keep the student's knobs only"
    assert f'lab = session("{nbs.notebook_id(py)}", globals())' in py.read_text()


@pytest.mark.parametrize("py", nbs.discover(), ids=lambda p: p.stem)
def test_notebook_defines_no_endpoint_defaults(py):
    text = py.read_text()
    assert "place_defaults(" not in text and not re.search(r"(?m)^(service|triton)_\w+_url\s*=", text), \
        "endpoints come from the lab session (servelab.lab.session), not from the notebook"


@pytest.mark.parametrize("py", nbs.discover(), ids=lambda p: p.stem)
def test_lesson_source_stays_within_its_line_budget(py):
    lines = len(py.read_text().splitlines())
    assert lines <= OVER_BUDGET.get(py.stem, MAX_SOURCE_LINES), \
        f"{py.name}: {lines} lines; move harness code into servelab.lab and show it with show_code"


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


def _rebound_functions(py) -> list[str]:
    """Names a lesson defines with `def` at top level and later binds to something else at top level (an
    assignment, a `with … as`, a `for` target): every cell after the rebinding calls the wrong object."""
    import ast

    import jupytext

    defined, found = set(), []
    for cell in jupytext.read(py).cells:
        if cell.cell_type != "code":
            continue
        for node in ast.parse(cell.source).body:
            if isinstance(node, ast.FunctionDef):
                defined.add(node.name)
                continue
            targets = [t for sub in ast.walk(node) if isinstance(sub, (ast.Assign, ast.AnnAssign, ast.For, ast.With))
                       for t in (sub.targets if isinstance(sub, ast.Assign) else
                                 [i.optional_vars for i in sub.items if i.optional_vars] if isinstance(sub, ast.With)
                                 else [sub.target])]
            names = {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
            found += sorted(names & defined)
    return found


@pytest.mark.parametrize("py", nbs.discover(), ids=lambda p: p.stem)
def test_no_lesson_rebinds_a_function_it_defined(py):
    """06c once named its Prometheus ExitStack `held`, the name of a helper its overload answer calls later: the
    default run failed there (the smoke profile skips that answer)."""
    assert not _rebound_functions(py), "give the value another name: a later cell calls the function"
