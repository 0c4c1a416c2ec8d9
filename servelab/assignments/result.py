"""What a check produces: a `CheckResult` shown in the notebook, kept in the notebook's output (a MIME
bundle the grader reads back) and in `<out_dir>/assignments/<notebook>.json`; `ExerciseFailed` only on request.

Why not raise by default: papermill stops a notebook at the first exception, so one unfinished exercise would
hide every later measurement and exercise. A student's notebook must run to the end and say what failed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from servelab.errors import ServelabError
from servelab.fileio import atomic_write

MIME_TYPE = "application/vnd.servelab.check+json"
STRICT_ENV = "SERVELAB_CHECKS_STRICT"

PASS, FAIL, NOT_IMPLEMENTED, ERROR, NOT_RUN = "pass", "fail", "not implemented", "error", "not run"
STATUSES = (PASS, FAIL, NOT_IMPLEMENTED, ERROR, NOT_RUN)


class ExerciseFailed(ServelabError):
    """Raised by a check in strict mode when the answer does not pass; `.result` is the CheckResult."""

    def __init__(self, result: CheckResult):
        super().__init__(result.line())
        self.result = result


@dataclass
class CheckResult:
    exercise: str
    status: str
    message: str
    check: str = ""
    notebook: str | None = None
    detail: dict = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return self.status == PASS

    def line(self) -> str:
        word = {PASS: "PASS", FAIL: "FAIL", NOT_IMPLEMENTED: "FAIL (not implemented)", ERROR: "FAIL (error)"}
        return f"{word.get(self.status, self.status.upper())} · exercise {self.exercise}: {self.message}"

    def as_dict(self) -> dict:
        return asdict(self)

    def __bool__(self) -> bool:
        return self.passed

    def _ipython_display_(self) -> None:
        """A check cell ends with the check call: its result was already shown once, by the check itself."""


class _Rejected(ServelabError):
    """Internal: the answer is wrong; the message is the hint shown to the student."""

    def __init__(self, hint: str, detail: dict | None = None):
        super().__init__(hint)
        self.detail = detail or {}


class NotRunHere(ServelabError):
    """The check cannot run on this target (e.g. no local model repository on a remote node); the message
    says why. The result is `not run`, neither a pass nor the student's failure."""


def reject(hint: str, detail: dict | None = None) -> None:
    """Fail the check with `hint`; `detail` (numbers the grader keeps, never shown as the answer) is recorded."""
    raise _Rejected(hint, detail)


def evaluate(answer: Any, args: tuple) -> tuple[Any, CheckResult | None]:
    """The student's answer: a value, or a function called with the check's inputs. Returns (value, None),
    or (None, partial result) when the function is not written yet or raised."""
    if not callable(answer):
        return answer, None
    try:
        return answer(*args), None
    except NotImplementedError as exc:
        text = str(exc) or "the exercise function still raises NotImplementedError"
        return None, CheckResult("", NOT_IMPLEMENTED, f"not done yet ({text}); replace the `raise` with your code")
    except Exception as exc:  # the student's code failed: say how, not where the answer is
        return None, CheckResult("", ERROR, f"your function raised {type(exc).__name__}: {exc}")


def strict_default() -> bool:
    """Whether a failed check raises when the caller does not say (STRICT_ENV, read into Settings)."""
    from servelab.config import Settings

    return Settings.from_env().checks_strict


def _in_kernel() -> bool:
    try:
        from IPython import get_ipython

        shell = get_ipython()
        return shell is not None and getattr(shell, "kernel", None) is not None
    except ImportError:
        return False


def show(result: CheckResult) -> None:
    """One output per check: the PASS/FAIL line as text, and the result as JSON for the grader."""
    if _in_kernel():
        import html

        from IPython.display import display

        colour = "#1a7f37" if result.passed else "#cf222e"
        box = (f'<div style="border-left:4px solid {colour};padding:4px 10px;font-family:monospace">'
               f"{html.escape(result.line())}</div>")
        display({"text/plain": result.line(), "text/html": box, MIME_TYPE: result.as_dict()}, raw=True)
    else:
        print(result.line())


def record(result: CheckResult, out_dir: str | Path) -> Path:
    """Merge the result into <out_dir>/assignments/<notebook>.json (temp + rename)."""
    folder = Path(out_dir) / "assignments"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{result.notebook or 'notebook'}.json"
    data = {}
    if path.exists():
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError:
            data = {}
    data[result.exercise] = result.as_dict()
    return atomic_write(path, json.dumps(data, indent=2, default=str))


def run_check(name: str, exercise: str, answer: Any, args: tuple, judge: Callable[[Any], str],
              step=None, strict: bool | None = None) -> CheckResult:
    """Evaluate the answer, judge it (judge returns the PASS message, or (message, detail), or calls
    `reject(hint)`), show, record, and raise ExerciseFailed only in strict mode."""
    value, early = evaluate(answer, args)
    if early is not None:
        result = early
    else:
        try:
            said = judge(value)
            message, detail = said if isinstance(said, tuple) else (said, {})
            result = CheckResult("", PASS, message, detail=dict(detail))
        except _Rejected as exc:
            result = CheckResult("", FAIL, str(exc), detail=dict(exc.detail))
        except NotRunHere as exc:
            result = CheckResult("", NOT_RUN, f"not run here: {exc}")
        except NotImplementedError as exc:  # code run by the check (a served route, a staged model) is a stub
            text = str(exc) or "the exercise code still raises NotImplementedError"
            result = CheckResult("", NOT_IMPLEMENTED, f"not done yet ({text}); replace the `raise` with your code")
    result.exercise, result.check = str(exercise), name
    if step is not None:
        result.notebook = str(getattr(step, "id", None) or "") or None
    show(result)
    out_dir = getattr(step, "out_dir", None) if step is not None else None
    if out_dir is not None:
        try:
            record(result, out_dir)
        except OSError as exc:  # the notebook output still carries the result
            print(f"(could not record the result under {out_dir}: {exc})")
    if (strict_default() if strict is None else strict) and not result.passed:
        raise ExerciseFailed(result)
    return result
