"""Settings are read from the environment in servelab/config.py only, and nothing passes settings between
modules by writing os.environ: a write there is invisible at the call site and leaks into every later test.
Checked on the source (AST), so a use inside a function counts too."""

from __future__ import annotations

import ast
from pathlib import Path

import servelab

ROOT = Path(servelab.__file__).resolve().parent
STAGING = ROOT / "triton" / "staging"  # Triton's model templates run inside tritonserver, not in servelab

# Modules allowed to read the environment, and why. Keep it short: a new setting belongs in Settings.
READERS = {
    "config.py": "the one place settings are read (Settings.from_env, workspace, results_dir)",
    # building a child process's environment from this one's (the child is another program)
    "managed_process.py": "a child's environment: this one's plus its settings",
    "service/process.py": "the uvicorn child's environment",
    "triton/server.py": "tritonserver's environment, and where its binary and python live",
    "triton/perf_analyzer.py": "perf_analyzer's environment",
    "bench/servers/litserve_server.py": "the LitServe child's environment",
    "lab/notebooks.py": "a notebook kernel's environment: this one's plus what the lab run gives it",
    "service/launch.py": "none read: it writes one variable (WRITERS)",
    # not servelab's settings: OpenStack's own convention, which python-chi and the openstack CLI read the same way
    "provision/plan.py": "the OpenStack RC file's OS_* variables",
}
# Writes that pass a setting to code or to child processes through os.environ: none. A child process is given
# its environment explicitly; code is given an argument or a Settings field.
WRITERS: dict[str, str] = {
    # not servelab's setting: a third-party library whose one switch is a variable it reads itself
    "service/launch.py": "a worker of several switches prometheus-client's multiprocess mode on (PROMETHEUS_MULTIPROC_DIR)",
}
WRITE_METHODS = {"update", "pop", "setdefault", "clear", "popitem", "__setitem__", "__delitem__"}


def _is_environ(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "environ" and getattr(node.value, "id", None) == "os"


def _uses(path: Path) -> tuple[bool, bool]:
    """(reads, writes) of os.environ / os.getenv / os.putenv in one module."""
    reads = writes = False
    for node in ast.walk(ast.parse(path.read_text())):
        if _is_environ(node) or (isinstance(node, ast.Attribute) and node.attr in ("getenv", "getenvb")
                                 and getattr(node.value, "id", None) == "os"):
            reads = True
        if isinstance(node, ast.Attribute) and node.attr in ("putenv", "unsetenv") and getattr(node.value, "id", None) == "os":
            writes = True
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.Delete)):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
            writes |= any(isinstance(t, ast.Subscript) and _is_environ(t.value) for t in targets)
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in WRITE_METHODS
                and _is_environ(node.func.value)):
            writes = True
    return reads, writes


def _modules() -> dict[str, tuple[bool, bool]]:
    return {p.relative_to(ROOT).as_posix(): _uses(p) for p in sorted(ROOT.rglob("*.py")) if STAGING not in p.parents}


def test_only_the_listed_modules_read_the_environment():
    readers = {m for m, (r, w) in _modules().items() if r or w}
    assert readers - set(READERS) == set(), "read settings in servelab/config.py (Settings) and pass them down"


def test_no_module_passes_settings_through_environ_writes():
    writers = {m for m, (_, w) in _modules().items() if w}
    assert writers - set(WRITERS) == set(), "pass the value as an argument or a Settings field, not via os.environ"


def test_the_allow_lists_hold_no_stale_entries():
    mods = _modules()
    assert [m for m in READERS if not any(mods.get(m, (False, False)))] == []
    assert [m for m in WRITERS if not mods.get(m, (False, False))[1]] == []


def test_the_checker_sees_a_write_inside_a_function(tmp_path):
    src = tmp_path / "m.py"
    src.write_text("import os\ndef f():\n    os.environ['SERVELAB_X'] = '1'\n    os.environ.update(a='b')\n")
    assert _uses(src) == (True, True)
    src.write_text("import os\nx = os.getenv('HOME')\n")
    assert _uses(src) == (True, False)
