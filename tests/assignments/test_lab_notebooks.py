"""The real lab notebooks: their exercises follow the format, the hand-out has no solution text, and — where a
lab run's executed notebooks exist — the instructor versions passed every check in that run."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import jupytext
import pytest

from servelab.assignments import checks
from servelab.assignments.exercises import find, is_exercise, solution_lines, student_notebook
from servelab.assignments.generate import build
from servelab.assignments.grade import grade
from servelab.config import CHECKOUT as REPO_ROOT  # the tests run from a clone
from servelab.lab.notebooks import discover, notebook_id

SOURCES = discover()


def _words(text: str) -> set[str]:
    return set(re.findall(r"[A-Za-z_][A-Za-z0-9_]{4,}|\d{3,}", text))


def _without_solutions(nb) -> str:
    from servelab.assignments.exercises import BEGIN, END

    out, inside = [], False
    for cell in nb.cells:
        for line in cell.source.splitlines():
            if BEGIN.match(line):
                inside = True
            elif END.match(line):
                inside = False
            elif not inside:
                out.append(line)
    return "\n".join(out)


FIXTURE = Path(__file__).parent / "fixtures" / "91_assignment_fixture.py"


@pytest.mark.parametrize("py", SOURCES + [FIXTURE], ids=[p.stem for p in SOURCES + [FIXTURE]])
def test_exercises_follow_the_format(py):
    nb = jupytext.read(py)
    exercises = find(nb, py.name)  # raises FormatError naming the cell
    for e in exercises:
        assert e.id.split(".")[0] == notebook_id(py), f"{py.name}: exercise {e.id} should be numbered {notebook_id(py)}.k"
        assert e.check in checks.CHECKS, f"{py.name}: exercise {e.id} calls checks.{e.check}, not a check function"
        assert solution_lines(e), f"{py.name}: exercise {e.id}: the solution has no distinctive line to search for"
    student = student_notebook(nb, py.name)
    text = "\n".join(c.source for c in student.cells)
    outside = _words(text) - _words(" ".join(e.stub() for e in exercises))  # the stubs are ours, not the solution's
    for e in exercises:
        leaked = [ln for ln in solution_lines(e) if ln in text]
        assert not leaked, f"{py.name}: exercise {e.id}: solution text in the student version: {leaked}"
        assert f"exercise {e.id}:" in text
        # identifiers and literals only the solution uses (its distinctive tokens) are gone too
        only_in_solution = _words(e.solution) - _words(_without_solutions(nb))
        assert not only_in_solution & outside, (py.name, e.id, only_in_solution & outside)
    for cell in student.cells:
        if is_exercise(cell):
            compile(cell.source, f"{py.name} exercise", "exec")


def test_handout_from_the_real_notebooks(tmp_path):
    assert any(find(jupytext.read(p), p.name) for p in SOURCES), "no notebook has exercises"
    info = build(tmp_path / "handout")
    out = info["out"]
    assert sorted(p.name for p in (out / "student").glob("*.ipynb")) == sorted(info["notebooks"])
    assert sorted(p.name for p in (out / "instructor").glob("*.ipynb")) == sorted(info["notebooks"])
    assert "00_provision_gpu_node.py" in info["skipped"] or not (REPO_ROOT / "notebooks" / "00_provision_gpu_node.py").exists()
    for row in info["exercises"]:
        student = (out / "student" / row["notebook"]).read_text()
        assert f"exercise {row['exercise']}:" in student


def _latest_lab_run(tmp_path_factory) -> Path | None:
    """SERVELAB_LAB_RUN; else this pytest session's smoke run (tests/notebooks); else the newest run in results/.
    The session's own run comes first: a container test writing into results/ meanwhile is not what is graded."""
    if os.environ.get("SERVELAB_LAB_RUN"):
        return Path(os.environ["SERVELAB_LAB_RUN"])
    for found in (tmp_path_factory.getbasetemp().glob("lab-results*/*/run.json"),
                  (REPO_ROOT / "results").glob("*/run.json")):
        runs = sorted((p.parent for p in found), key=lambda p: p.stat().st_mtime)
        if runs:
            return runs[-1]
    return None


def test_instructor_notebooks_passed_in_the_last_lab_run(tmp_path_factory):
    run = _latest_lab_run(tmp_path_factory)
    if run is None or not (run / "notebooks").is_dir():
        pytest.skip("no lab run found (run `servelab lab run --profile smoke`, or set SERVELAB_LAB_RUN)")
    state = json.loads((run / "run.json").read_text())
    ok = {e["name"] for e in state.get("notebooks", []) if e.get("status") == "ok"}
    rows = [r for r in grade(run / "notebooks", say=lambda s: None) if Path(r["notebook"]).stem in ok]
    if not rows:
        pytest.skip(f"{run.name}: no completed notebook with exercises")
    failed = [f"{r['notebook']} {r['exercise']}: {r['status']} — {r['message']}" for r in rows if r["status"] != "pass"]
    assert not failed, f"instructor solutions failed their checks in lab run {run.name}:\n" + "\n".join(failed)


# a step with more: 04 puts the student at Triton's controls (their own /stats read, config edited on disk, load
# request and perf_analyzer lines) besides its prediction and its stanza
MORE_EXERCISES = {"04": 6}


def test_every_step_has_one_to_four_exercises():
    steps = ["01", "02", "03", "04", "05a", "05b", "06a", "06b", "06c", "07", "08", "09"]
    counts = {notebook_id(p): len(find(jupytext.read(p), p.name)) for p in SOURCES}
    assert {s: counts.get(s, 0) for s in steps if not 1 <= counts.get(s, 0) <= MORE_EXERCISES.get(s, 4)} == {}


@pytest.mark.notebooks
def test_real_student_notebooks_run_to_the_end_and_fail_cleanly(tmp_path):
    """Student versions of two lab notebooks that need no servers (03: in-process engines, 05b: rendered
    configs), executed by papermill with smoke parameters: every exercise reports `not implemented`, and the
    kernel reaches the last cell."""
    import nbformat

    from servelab.lab.params import profile

    info = build(tmp_path / "handout", only=["03", "05b"])
    rows = grade(info["out"] / "student", tmp_path / "grades.csv", execute=True,
                 parameters={**profile("smoke"), "out_dir": str(tmp_path / "run")}, say=lambda s: None)
    assert rows and {r["status"] for r in rows} == {"not implemented"}, rows
    for name in info["notebooks"]:
        executed = nbformat.read(info["out"] / "student" / "executed" / name, as_version=4)
        last = [c for c in executed.cells if c.cell_type == "code"][-1]
        assert last.get("execution_count"), f"{name}: the last cell did not run"
        assert not any(o.get("output_type") == "error" for c in executed.cells for o in c.get("outputs", []))


@pytest.mark.parametrize("py", SOURCES, ids=[p.stem for p in SOURCES])
def test_parameters_default_to_real_measurements(py):
    """Opened in JupyterLab, a notebook measures with the default profile's settings; the smoke profile's
    seconds-long values come from `--profile smoke`, never from the notebook's own defaults."""
    import ast

    from servelab.lab.params import LAB_PROFILES

    cell = next((c for c in jupytext.read(py).cells if "parameters" in (c.metadata.get("tags") or [])), None)
    if cell is None:
        pytest.skip(f"{py.name} has no parameters cell")
    values = {n.targets[0].id: ast.literal_eval(n.value) for n in ast.parse(cell.source).body
              if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Name) and n.targets[0].id in LAB_PROFILES["default"]}
    wrong = {k: v for k, v in values.items() if v != LAB_PROFILES["default"][k]}
    assert not wrong, f"{py.name}: parameters differ from the default profile: {wrong}"


def test_jupyterlab_is_installed_and_sees_the_servelab_kernel():
    """`make jupyter` opens JupyterLab from this environment; the notebooks' `servelab` kernel is this Python."""
    import sys
    from importlib.metadata import version

    from jupyter_client.kernelspec import KernelSpecManager

    from servelab.lab.notebooks import KERNEL, ensure_kernel

    assert version("jupyterlab").startswith("4.")  # JupyterLab 4 renders the lessons' mermaid diagrams
    assert (Path(sys.executable).parent / "jupyter-lab").exists()
    ensure_kernel()
    spec = KernelSpecManager().get_kernel_spec(KERNEL)
    assert Path(spec.argv[0]).resolve() == Path(sys.executable).resolve()
    assert all(jupytext.read(p).metadata.get("kernelspec", {}).get("name") == KERNEL for p in SOURCES)
