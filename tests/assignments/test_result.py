"""What every check does with an answer (servelab.assignments.result.run_check): a function is called, an
unfinished exercise is `not implemented`, an answer that raises is an error, strict mode raises on a failure
and results are recorded under the step."""

from __future__ import annotations

import json

import pytest

from servelab.assignments.result import ERROR, FAIL, NOT_IMPLEMENTED, PASS, STRICT_ENV, ExerciseFailed
from tests.assignments.grids import qd


@pytest.fixture(autouse=True)
def _not_strict(monkeypatch):
    monkeypatch.delenv(STRICT_ENV, raising=False)




def test_function_answers_not_implemented_and_errors():
    def todo(grid, budget):
        raise NotImplementedError("exercise t.1: choose")

    assert qd(lambda g, b: 2000).status == PASS
    r = qd(todo)
    assert r.status == NOT_IMPLEMENTED and not r.passed
    r = qd(lambda g, b: g["no_such_column"])
    assert r.status == ERROR and "KeyError" in r.message


def test_strict_mode_raises_and_records(tmp_path, monkeypatch):
    class FakeStep:  # what a check uses of servelab.lab.step.Step
        id, out_dir = "04", tmp_path

    with pytest.raises(ExerciseFailed) as info:
        qd(0, strict=True, step=FakeStep())
    assert info.value.result.status == FAIL
    monkeypatch.setenv(STRICT_ENV, "1")
    with pytest.raises(ExerciseFailed):
        qd(0)
    assert qd(2000, step=FakeStep()).passed  # a pass never raises
    saved = json.loads((tmp_path / "assignments" / "04.json").read_text())
    assert saved["t.1"]["status"] == PASS and saved["t.1"]["notebook"] == "04"
