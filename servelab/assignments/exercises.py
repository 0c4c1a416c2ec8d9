"""The exercise format in a notebook source, and the student/instructor variants made from it.

An exercise cell is a code cell tagged `exercise` whose first line names it, holding the solution between
markers; the next code cell is its check (it passes `exercise="<id>"` to a servelab.assignments.checks function):

    # %% tags=["exercise"]
    # Exercise 04.1: choose max_queue_delay_microseconds for the latency budget
    def choose_queue_delay(grid, budget_ms):
        \"\"\"What the student must do (kept in both versions).\"\"\"
        # BEGIN SOLUTION
        ...
        # END SOLUTION

    # %%
    checks.queue_delay_for_budget(choose_queue_delay, grid, budget_ms, exercise="04.1", step=step)

The student version replaces each marked block with `raise NotImplementedError("exercise 04.1: …")` at the
block's indentation (so the exercise is a function whose body the student writes; defining it never fails,
and the check catches the NotImplementedError); the instructor version keeps everything.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from pathlib import Path

from servelab.errors import ServelabError

TAG = "exercise"
HEADER = re.compile(r"^#\s*Exercise\s+(?P<id>[0-9]{2}[a-z]?\.[0-9]+)\s*[:—–-]\s*(?P<title>.+?)\s*$")
BEGIN = re.compile(r"^(?P<indent>\s*)#\s*BEGIN SOLUTION\s*$")
END = re.compile(r"^\s*#\s*END SOLUTION\s*$")
CHECK_ID = re.compile(r"""exercise\s*=\s*["'](?P<id>[^"']+)["']""")


class FormatError(ServelabError, ValueError):
    """An exercise cell that does not follow the format; the message names the notebook and the cell."""


@dataclass
class Exercise:
    notebook: str      # notebook id, e.g. "04"
    source: str        # file name the exercise came from
    id: str            # "04.1"
    title: str
    cell: int          # index of the exercise cell
    check_cell: int    # index of its check cell
    check: str         # the checks function called, e.g. "queue_delay_for_budget"
    solution: str      # the text between the markers (markers excluded)

    def stub(self) -> str:
        return f'raise NotImplementedError("exercise {self.id}: {self.title}")'


def is_exercise(cell) -> bool:
    return cell.get("cell_type") == "code" and TAG in (cell.get("metadata", {}).get("tags") or ())


def _split(source: str, where: str) -> list[tuple[str, list[str]]]:
    """(indent, solution lines) per marked block; raises FormatError on bad nesting."""
    blocks, inside, indent = [], None, ""
    for line in source.splitlines():
        if BEGIN.match(line):
            if inside is not None:
                raise FormatError(f"{where}: BEGIN SOLUTION inside another solution block")
            inside, indent = [], BEGIN.match(line)["indent"]
        elif END.match(line):
            if inside is None:
                raise FormatError(f"{where}: END SOLUTION without BEGIN SOLUTION")
            blocks.append((indent, inside))
            inside = None
        elif inside is not None:
            inside.append(line)
    if inside is not None:
        raise FormatError(f"{where}: BEGIN SOLUTION without END SOLUTION")
    return blocks


def find(nb, name: str = "notebook") -> list[Exercise]:
    """Every exercise of a notebook (nbformat/jupytext NotebookNode), validated."""
    from servelab.lab.notebooks import notebook_id

    out, seen = [], set()
    nid = notebook_id(Path(name)) if name[:2].isdigit() else name
    cells = nb.cells
    for i, cell in enumerate(cells):
        if not is_exercise(cell):
            continue
        where = f"{name} cell {i}"
        first = next((ln for ln in cell.source.splitlines() if ln.strip()), "")
        m = HEADER.match(first.strip())
        if not m:
            raise FormatError(f"{where}: an exercise cell starts with '# Exercise <NN.k>: <title>', got {first!r}")
        blocks = _split(cell.source, where)
        if not blocks:
            raise FormatError(f"{where}: exercise {m['id']} has no '# BEGIN SOLUTION' … '# END SOLUTION' block")
        if m["id"] in seen:
            raise FormatError(f"{where}: exercise id {m['id']} used twice")
        seen.add(m["id"])
        j = next((k for k in range(i + 1, len(cells)) if cells[k].cell_type == "code"), None)
        found = CHECK_ID.search(cells[j].source) if j is not None else None
        if j is None or not found or found["id"] != m["id"] or "checks." not in cells[j].source:
            raise FormatError(f"{where}: the code cell after exercise {m['id']} must call a "
                              f"servelab.assignments.checks function with exercise=\"{m['id']}\"")
        fn = re.search(r"checks\.(\w+)\s*\(", cells[j].source)
        out.append(Exercise(notebook=nid, source=name, id=m["id"], title=m["title"], cell=i, check_cell=j,
                            check=fn.group(1) if fn else "",
                            solution="\n".join("\n".join(b) for _, b in blocks)))
    return out


def student_source(source: str, stub: str, where: str = "cell") -> str:
    """The cell with each solution block replaced by `stub` at the block's indentation."""
    _split(source, where)  # validate first
    out, inside = [], False
    for line in source.splitlines():
        b = BEGIN.match(line)
        if b:
            inside = True
            out.append(f"{b['indent']}{stub}")
        elif END.match(line):
            inside = False
        elif not inside:
            out.append(line)
    return "\n".join(out)


def student_notebook(nb, name: str = "notebook"):
    """A copy of `nb` with every solution replaced by a NotImplementedError stub, outputs cleared."""
    exercises = {e.cell: e for e in find(nb, name)}
    new = copy.deepcopy(nb)
    for i, cell in enumerate(new.cells):
        if i in exercises:
            cell.source = student_source(cell.source, exercises[i].stub(), f"{name} cell {i}")
    return clear_outputs(new)


def clear_outputs(nb):
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    return nb


def solution_lines(exercise: Exercise, min_len: int = 12) -> list[str]:
    """Distinctive lines of a solution (stripped, code not comments, long enough not to occur by chance)."""
    lines = []
    for ln in exercise.solution.splitlines():
        s = ln.strip()
        if len(s) >= min_len and not s.startswith("#") and s not in ('"""', "'''"):
            lines.append(s)
    return lines
