"""Every exercise of the real notebooks, without running the notebooks: the instructor's exercise cell and its
check cell execute against synthetic stand-ins for the variables the notebook would have measured (shaped
like this lab's tables). The solution must PASS; the student version must fail cleanly (`not implemented`)."""

from __future__ import annotations

import ast

import jupytext
import numpy as np
import pandas as pd
import pytest

from servelab.assignments import checks
from servelab.assignments.exercises import find, student_source
from servelab.assignments.result import NOT_IMPLEMENTED, PASS, STRICT_ENV
from servelab.lab.notebooks import discover

# variables each exercise's cells use, as the notebook's measuring cells would leave them
BINDINGS: dict[str, dict] = {}


def _exercises():
    out = []
    for py in discover():
        nb = jupytext.read(py)
        for e in find(nb, py.name):
            out.append(pytest.param(nb, e, id=e.id))
    return out


def _run(cells: list[str], env: dict):
    """Exec the cells; the value of the last cell's final expression (the check's result) is returned."""
    value = None
    for src in cells:
        tree = ast.parse(src)
        last = tree.body[-1] if tree.body and isinstance(tree.body[-1], ast.Expr) else None
        if last is not None:
            tree.body = tree.body[:-1]
        exec(compile(tree, "<cell>", "exec"), env)
        value = eval(compile(ast.Expression(last.value), "<cell>", "eval"), env) if last is not None else None
    return value


EXERCISES = _exercises()


@pytest.mark.skipif(not EXERCISES, reason="no exercises in the notebooks yet")
@pytest.mark.parametrize("nb, exercise", EXERCISES or [pytest.param(None, None, id="none")])
def test_solution_passes_and_student_version_fails_cleanly(nb, exercise, monkeypatch, capsys):
    monkeypatch.delenv(STRICT_ENV, raising=False)
    assert exercise.id in BINDINGS, f"add synthetic bindings for exercise {exercise.id} ({exercise.check}) to BINDINGS"
    base = {"checks": checks, "step": None, "pd": pd, "np": np, **BINDINGS[exercise.id]}
    ex_src, check_src = nb.cells[exercise.cell].source, nb.cells[exercise.check_cell].source

    result = _run([ex_src, check_src], dict(base))
    assert result is not None and result.status == PASS, (exercise.id, result and result.message)
    assert "PASS" in capsys.readouterr().out

    student = student_source(ex_src, exercise.stub())
    result = _run([student, check_src], dict(base))
    assert result.status == NOT_IMPLEMENTED, (exercise.id, result.message)
