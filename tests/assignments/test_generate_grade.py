"""The exercise format, the hand-out generator and the grader, on a small fixture notebook in the lab's
format (fixtures/91_assignment_fixture.py) — executed for real by papermill through `servelab lab grade`."""

from __future__ import annotations

import csv
import shutil
import subprocess
import sys
from pathlib import Path

import jupytext
import nbformat
import pytest

from servelab.assignments.exercises import FormatError, find, solution_lines, student_notebook
from servelab.assignments.generate import build
from servelab.assignments.grade import grade

FIXTURES = Path(__file__).parent / "fixtures"
FIXTURE = FIXTURES / "91_assignment_fixture.py"


def _read(py: Path):
    return jupytext.read(py)


def test_format_finds_exercises_and_checks():
    ex = find(_read(FIXTURE), FIXTURE.name)
    assert [(e.id, e.check) for e in ex] == [("91.1", "queue_delay_for_budget"), ("91.2", "batching_stanza")]
    assert all(e.notebook == "91" for e in ex)
    assert "feasible_delays" in ex[0].solution and "KIND_CPU" in ex[1].solution


@pytest.mark.parametrize("mutate, why", [
    (lambda s: s.replace("# Exercise 91.1: choose", "# choose"), "starts with '# Exercise"),
    (lambda s: s.replace("    # END SOLUTION\n\n\n# %%\nchecks.queue_delay", "\n\n# %%\nchecks.queue_delay"), "without END"),
    (lambda s: s.replace('exercise="91.2"', 'exercise="91.9"'), "exercise=\"91.2\""),
    (lambda s: s.replace("# Exercise 91.2:", "# Exercise 91.1:"), "used twice"),
])
def test_format_errors_name_the_problem(tmp_path, mutate, why):
    bad = tmp_path / FIXTURE.name
    bad.write_text(mutate(FIXTURE.read_text()))
    with pytest.raises(FormatError, match=why.replace("(", r"\(")):
        find(_read(bad), bad.name)


def test_student_version_stubs_solutions_keeps_checks():
    nb = _read(FIXTURE)
    student = student_notebook(nb, FIXTURE.name)
    text = "\n".join(c.source for c in student.cells)
    for e in find(nb, FIXTURE.name):
        assert f'raise NotImplementedError("exercise {e.id}: {e.title}")' in text
        assert not [ln for ln in solution_lines(e) if ln in text]
        assert f'exercise="{e.id}"' in text
    assert "BEGIN SOLUTION" not in text and "feasible_delays" not in text and "KIND_CPU" not in text
    # the stub sits inside the function, so defining it never raises
    cell = next(c for c in student.cells if "tags" in c.metadata and "exercise" in c.metadata.tags)
    compile(cell.source, "exercise", "exec")


@pytest.fixture(scope="module")
def handout(tmp_path_factory):
    out = tmp_path_factory.mktemp("handout") / "assignments"
    info = build(out, notebook_dir=FIXTURES)
    return out, info


def test_build_writes_handout(handout):
    out, info = handout
    assert info["notebooks"] == ["91_assignment_fixture.ipynb"]
    student = nbformat.read(out / "student" / "91_assignment_fixture.ipynb", as_version=4)
    instructor = nbformat.read(out / "instructor" / "91_assignment_fixture.ipynb", as_version=4)
    nbformat.validate(student)
    assert "Student version" in student.cells[1].source
    assert "feasible_delays" not in nbformat.writes(student)
    assert "feasible_delays" in nbformat.writes(instructor)
    assert all(not c.get("outputs") for c in student.cells + instructor.cells if c.cell_type == "code")
    rows = list(csv.DictReader((out / "exercises.csv").open()))
    assert [r["exercise"] for r in rows] == ["91.1", "91.2"]
    build(out, notebook_dir=FIXTURES)  # rebuilding its own folder is fine
    other = out.parent / "not-a-handout"
    other.mkdir()
    with pytest.raises(ValueError, match="not made by"):
        build(other, notebook_dir=FIXTURES)


@pytest.mark.notebooks
def test_grade_executes_and_reports_each_exercise(handout, tmp_path):
    """Two student notebooks: one complete (the instructor's answers), one with a wrong answer and an
    unfinished exercise; the student version runs to its end and its checks fail cleanly."""
    out, _ = handout
    folder = tmp_path / "submissions"
    (folder / "ada").mkdir(parents=True)
    (folder / "bob").mkdir()
    shutil.copy(out / "instructor" / "91_assignment_fixture.ipynb", folder / "ada")
    bob = nbformat.read(out / "student" / "91_assignment_fixture.ipynb", as_version=4)
    ex = next(c for c in bob.cells if c.cell_type == "code" and "Exercise 91.1" in c.source)
    ex.source = ex.source.replace('    raise NotImplementedError("exercise 91.1: choose max_queue_delay_microseconds '
                                  'for the latency budget")', "    return 10000  # the fastest delay")
    assert "return 10000" in ex.source
    nbformat.write(bob, folder / "bob" / "91_assignment_fixture.ipynb")

    csv_path = tmp_path / "grades.csv"
    rows = grade(folder, csv_path, execute=True, parameters={"budget_ms": 250.0}, say=lambda s: None)
    got = {(r["notebook"], r["exercise"]): r["status"] for r in csv.DictReader(csv_path.open())}
    assert got == {
        ("ada/91_assignment_fixture.ipynb", "91.1"): "pass",
        ("ada/91_assignment_fixture.ipynb", "91.2"): "pass",
        ("bob/91_assignment_fixture.ipynb", "91.1"): "fail",
        ("bob/91_assignment_fixture.ipynb", "91.2"): "not implemented",
    }
    assert [r["passed"] for r in rows] == [1, 1, 0, 0]
    executed = nbformat.read(folder / "executed" / "bob" / "91_assignment_fixture.ipynb", as_version=4)
    assert "fixture done" in str(executed.cells[-1].outputs)  # the kernel ran to the last cell
    assert "over the 250 ms budget" in next(r["message"] for r in rows if r["status"] == "fail")

    # the executed copies grade the same without executing again, through the CLI
    res = subprocess.run([sys.executable, "-m", "servelab.cli", "lab", "grade", str(folder / "executed"),
                          "--out", str(tmp_path / "again.csv")], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "2/4 exercises passed" in res.stdout
    again = {(r["notebook"], r["exercise"]): r["status"] for r in csv.DictReader((tmp_path / "again.csv").open())}
    assert again == got


def test_grade_unexecuted_notebook_reports_not_run(handout, tmp_path):
    out, _ = handout
    folder = tmp_path / "in"
    folder.mkdir()
    shutil.copy(out / "student" / "91_assignment_fixture.ipynb", folder)
    rows = grade(folder, tmp_path / "g.csv", say=lambda s: None)
    assert [r["status"] for r in rows] == ["not run", "not run"]
    assert "execute it first" in rows[0]["message"]
    with pytest.raises(FileNotFoundError):
        grade(tmp_path / "nope", say=lambda s: None)


def test_cli_errors_are_one_line(tmp_path):
    res = subprocess.run([sys.executable, "-m", "servelab.cli", "lab", "grade", str(tmp_path / "nope")],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 1 and res.stderr.strip().startswith("error:") and "no such folder" in res.stderr


def test_grade_sheet_keeps_predictions_and_scores(tmp_path):
    """The grader reads each check's detail: whether a prediction held, and the open assignment's score."""
    from servelab.assignments.grade import COLUMNS, results, write_csv
    from servelab.assignments.result import MIME_TYPE

    def check_output(exercise, detail):
        return nbformat.v4.new_output("display_data", data={
            "text/plain": "PASS", MIME_TYPE: {"exercise": exercise, "status": "pass", "message": "ok", "detail": detail}})

    nb = nbformat.v4.new_notebook()
    for ex, detail in (("1", {"prediction": "tie", "measured": "tie", "prediction_held": True}),
                       ("2", {"prediction": None}), ("3", {"score_img_s": 31.5}), ("4", {})):
        cell = nbformat.v4.new_code_cell(f"# Exercise 91.{ex}: t\n# BEGIN SOLUTION\n# END SOLUTION",
                                         metadata={"tags": ["exercise"]})
        nb.cells += [cell, nbformat.v4.new_code_cell("checks.x()", outputs=[check_output(f"91.{ex}", detail)])]
    rows = results(nb)
    assert [(r["prediction"], r["score"]) for r in rows] == [("held", ""), ("none", ""), ("", 31.5), ("", "")]
    path = write_csv([{"notebook": "n.ipynb", **r} for r in rows], tmp_path / "grades.csv")
    got = list(csv.DictReader(path.open()))
    assert list(got[0]) == COLUMNS and got[2]["score"] == "31.5"
