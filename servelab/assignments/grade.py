"""`servelab lab grade`: exercise results per student notebook, as CSV.

Reads the check results each executed notebook carries in its outputs (MIME type
application/vnd.servelab.check+json, written by the checks), and lists every exercise the notebook holds
(cells tagged `exercise`), so an exercise whose check never ran — the notebook stopped early, or was never
executed — is reported as `not run` rather than missing. With `execute=True`, notebooks without outputs are
first executed (servelab.lab.notebooks.execute, into <folder>/executed/; the originals untouched).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable
from pathlib import Path

from servelab.assignments.exercises import HEADER, is_exercise
from servelab.assignments.result import MIME_TYPE, NOT_RUN, PASS
from servelab.fileio import atomic_write

# prediction: for predict-then-measure exercises, whether the prediction written before the measurement held
# (held | did not hold | none); score: for the open-ended assignment, the chosen configuration's img/s
COLUMNS = ["notebook", "exercise", "title", "status", "passed", "prediction", "score", "message"]
EXECUTED_DIR = "executed"


def _executed(nb) -> bool:
    return any(c.cell_type == "code" and (c.get("execution_count") or c.get("outputs")) for c in nb.cells)


def results(nb) -> list[dict]:
    """One dict per exercise of an executed notebook: the check's last result, or status `not run`."""
    declared: dict[str, str] = {}
    for cell in nb.cells:
        if is_exercise(cell):
            first = next((ln for ln in cell.source.splitlines() if ln.strip()), "")
            m = HEADER.match(first.strip())
            if m:
                declared[m["id"]] = m["title"]
    got: dict[str, dict] = {}
    for cell in nb.cells:
        for out in cell.get("outputs", []) if cell.cell_type == "code" else []:
            data = out.get("data", {}).get(MIME_TYPE)
            if isinstance(data, dict) and data.get("exercise"):
                got[str(data["exercise"])] = data
    rows = []
    for ex in list(declared) + [e for e in got if e not in declared]:
        r = got.get(ex)
        status = r["status"] if r else NOT_RUN
        message = r.get("message", "") if r else "the check cell did not run (the notebook stopped before it, or was not executed)"
        detail = (r or {}).get("detail") or {}
        rows.append({"exercise": ex, "title": declared.get(ex, ""), "status": status,
                     "passed": int(status == PASS), "prediction": _prediction(detail),
                     "score": detail.get("score_img_s", ""), "message": message})
    return rows


def _prediction(detail: dict) -> str:
    if "prediction" not in detail:
        return ""  # not a predict-then-measure exercise
    held = detail.get("prediction_held")
    return "none" if detail.get("prediction") is None else {True: "held", False: "did not hold"}.get(held, "made")


def _execute(src: Path, dst: Path, parameters: dict) -> str | None:
    """Run one notebook; returns an error line when it failed (the output is still written)."""
    from servelab.lab.notebooks import declared_parameters, execute
    from servelab.lab.params import for_notebook

    try:
        execute(src, dst, for_notebook(declared_parameters(src), parameters))
    except Exception as exc:  # a crashed notebook still has the results of the checks that ran
        return f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1] if str(exc).strip() else ''}"
    return None


def grade(folder: Path, out_csv: Path | None = None, execute: bool = False, parameters: dict | None = None,
          say: Callable[[str], None] = print) -> list[dict]:
    """Grade every .ipynb under `folder` (recursively; skips .ipynb_checkpoints and <folder>/executed/); write
    the CSV (temp + rename) when `out_csv` is given; return the rows."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder}: no such folder of notebooks")
    paths = sorted(p for p in folder.rglob("*.ipynb")
                   if ".ipynb_checkpoints" not in p.parts and EXECUTED_DIR not in p.relative_to(folder).parts[:1])
    if not paths:
        raise FileNotFoundError(f"{folder}: no .ipynb notebooks to grade")
    rows = []
    with _stack_for(folder, paths, execute, parameters, say) as params:
        for path in paths:
            rows += _grade_one(folder, path, execute, params, say)
    if out_csv is not None:
        write_csv(rows, Path(out_csv))
    return rows


@contextlib.contextmanager
def _stack_for(folder: Path, paths: list[Path], execute: bool, parameters: dict | None, say):
    """Parameters for executing: the given ones, out_dir under <folder>/executed/, and — when a notebook to
    execute takes service/Triton URLs and none were given — a local stack on free loopback ports."""
    import nbformat

    params = dict(parameters or {})
    todo = [p for p in paths if execute and not _executed(nbformat.read(p, as_version=4))]
    if not todo:
        yield params
        return
    from servelab.lab.notebooks import declared_parameters, uses_servers
    from servelab.lab.runner import URL_KEYS

    run_dir = (folder / EXECUTED_DIR / "results").resolve()
    params.setdefault("out_dir", str(run_dir))
    wants = set().union(*(declared_parameters(p) for p in todo)) & URL_KEYS
    wants |= {"service_url", "triton_http_url"} if any(uses_servers(p) for p in todo) else set()  # a lab session's
    if not wants or wants <= set(params) or (params.get("place") or "local") != "local":
        yield params
        return
    from servelab.lab.stack import local_stack

    say("starting the local stack (service + tritonserver on free loopback ports) …")
    with local_stack(run_dir, ports="free", say=say) as info:
        yield {**info.endpoints.as_params(), "triton_repository": info.triton_repository, **params}


def _grade_one(folder: Path, path: Path, execute: bool, parameters: dict, say) -> list[dict]:
    import nbformat

    rows = []
    rel = path.relative_to(folder).as_posix()
    nb = nbformat.read(path, as_version=4)
    note = ""
    if not _executed(nb) and execute:
        dst = folder / EXECUTED_DIR / rel
        say(f"executing {rel} …")
        err = _execute(path, dst, dict(parameters or {}))
        nb = nbformat.read(dst, as_version=4)
        note = f"notebook stopped: {err}" if err else ""
    elif not _executed(nb):
        note = "notebook has no outputs: execute it first (or pass --execute)"
    found = results(nb)
    if not found:
        say(f"{rel}: no exercises")
    for r in found:
        if r["status"] == NOT_RUN and note:
            r["message"] = note
        rows.append({"notebook": rel, **r})
    passed = sum(r["passed"] for r in found)
    say(f"{rel}: {passed}/{len(found)} exercises passed")
    return rows


def write_csv(rows: list[dict], path: Path) -> Path:
    import pandas as pd

    one_line = [{k: re.sub(r"\s+", " ", str(r.get(k, ""))) for k in COLUMNS} for r in rows]
    return atomic_write(path, pd.DataFrame(one_line, columns=COLUMNS).to_csv(index=False))
