"""Every exception class servelab defines derives from servelab.errors.ServelabError, the one the CLI catches,
and the CLI answers a bad input with one line and a non-zero exit status."""

from __future__ import annotations

import ast
import importlib
import inspect
import subprocess
import sys
from pathlib import Path

import servelab
from servelab.errors import ServelabError

ROOT = Path(servelab.__file__).resolve().parent
STAGING = ROOT / "triton" / "staging"  # Triton's model templates: run by tritonserver, never imported


def _exception_classes() -> list[type]:
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        if STAGING in path.parents or path.name == "__main__.py":
            continue
        names = [n.name for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.ClassDef)]
        if not names:
            continue
        parts = ["servelab", *path.relative_to(ROOT).with_suffix("").parts]
        mod = importlib.import_module(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
        for obj in vars(mod).values():
            if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == mod.__name__:
                found.append(obj)
    return found


def test_every_servelab_exception_derives_from_the_root():
    classes = _exception_classes()
    assert len(classes) > 20  # the walk found them
    assert [f"{c.__module__}.{c.__qualname__}" for c in classes if not issubclass(c, ServelabError)] == []


def _bare_builtin_raises() -> list[str]:
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        if STAGING in path.parents:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call)
                    and getattr(node.exc.func, "id", None) in ("ValueError", "RuntimeError", "Exception")):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_nothing_raises_a_bare_builtin_the_cli_would_not_catch():
    # servelab.errors.InvalidValue and CannotRun keep ValueError and RuntimeError as bases, so callers that catch
    # the built-in kinds still do, and the CLI catches ServelabError alone
    assert _bare_builtin_raises() == []


def test_the_cli_answers_a_bad_setting_in_one_line():
    env = {"PATH": "/usr/bin:/bin", "SERVELAB_ENGINE": "tensorflow", "HOME": str(Path.home())}
    done = subprocess.run([sys.executable, "-m", "servelab.cli", "serve", "--port", "0"], capture_output=True, text=True,
                          env=env, timeout=120)
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "engine must be one of torch, onnx, onnx-int8, emulated" in lines[0], done.stderr
