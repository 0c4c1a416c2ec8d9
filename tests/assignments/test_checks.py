"""The checks package: every check a notebook calls is there under its old name, the pure checks start
nothing (no server, no process), and every import in servelab.assignments names something that exists —
including those inside functions and fallbacks, which only run when a live exercise does."""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import pytest

import servelab
from servelab.assignments import checks

PACKAGE = Path(servelab.__file__).parent
PURE = ("answer_tables", "predictions", "measured", "sizing", "config_answers")
LIVE = ("live_configs", "emulated_plan", "live_code", "by_hand", "live_requests")
# what starts a process or a server: a pure check imports none of these, directly or through servelab modules
STARTS_PROCESSES = ("subprocess", "multiprocessing", "uvicorn", "servelab.triton.server", "servelab.service.process",
                    "servelab.managed_process", "servelab.bench.servers", "servelab.lab.stack", "servelab.assignments.live")


def _file(module: str) -> Path | None:
    """The source file of a servelab module or package (None for anything else), found without importing it."""
    if module.split(".")[0] != "servelab":
        return None
    base = PACKAGE.parent.joinpath(*module.split("."))
    return next((p for p in (base / "__init__.py", base.with_suffix(".py")) if p.is_file()), None)


def _imports(module: str, *, inside_functions: bool) -> set[str]:
    """The modules `module` imports (its packages included, as Python runs their __init__ first)."""
    tree = ast.parse(_file(module).read_text())
    found = set()
    for node in ast.walk(tree) if inside_functions else tree.body:
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names if _file(f"{node.module}.{a.name}")}
    parts = module.split(".")
    return found | {".".join(parts[:i]) for i in range(1, len(parts))}


def _starts_processes(name: str) -> bool:
    return any(name == s or name.startswith(s + ".") for s in STARTS_PROCESSES)


def test_every_check_is_exported_under_its_name():
    for name in checks.__all__:
        assert hasattr(checks, name), name
    for name in checks.CHECKS:
        fn = getattr(checks, name)
        assert callable(fn) and "exercise" in inspect.signature(fn).parameters, name
        assert fn.__module__.rsplit(".", 1)[-1] in PURE + LIVE, (name, fn.__module__)
    assert set(checks.CHECKS) == {n for m in PURE + LIVE for n, f in vars(importlib.import_module(
        f"servelab.assignments.checks.{m}")).items() if inspect.isfunction(f) and f.__module__.endswith(m)
        and "exercise" in inspect.signature(f).parameters}


@pytest.mark.parametrize("module", PURE)
def test_a_pure_check_module_starts_nothing(module):
    """Its own imports, in functions too, and what they import when loaded, through servelab's modules."""
    start = f"servelab.assignments.checks.{module}"
    direct = _imports(start, inside_functions=True)
    assert not [m for m in direct if _starts_processes(m)], direct
    seen, todo, via = set(), sorted(direct), {m: start for m in direct}
    while todo:
        m = todo.pop()
        if m in seen or not _file(m):
            continue
        seen.add(m)
        for dep in _imports(m, inside_functions=False):
            via.setdefault(dep, m)
            if _starts_processes(dep) and dep.startswith("servelab."):
                pytest.fail(f"{start} reaches {dep} (imported by {m})")
            todo.append(dep)


def test_every_import_in_assignments_resolves():
    """A fallback or a function-level import runs only with a live exercise; a name removed from the bench must
    fail here, not in a student's notebook."""
    missing = []
    for path in sorted((PACKAGE / "assignments").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module.startswith("servelab")):
                continue
            module = importlib.import_module(node.module)
            for alias in node.names:
                if not hasattr(module, alias.name) and not _file(f"{node.module}.{alias.name}"):
                    missing.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: {node.module}.{alias.name}")
    assert not missing, missing
