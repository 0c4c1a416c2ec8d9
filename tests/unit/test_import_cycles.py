"""No import cycles in servelab, counting imports inside functions too (a cycle hidden in a function-level
import is still a cycle), none between its packages either (servelab.bench may be used by servelab.lab, never the
other way round; servelab.model by servelab.fingerprint, never the other way round), and no two modules with one name in different packages unless they play the same
role in each (a package's `cli`, a client backend named after its server)."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

import servelab

ROOT = Path(servelab.__file__).resolve().parent
STAGING = ROOT / "triton" / "staging"
SAME_ROLE = {"cli", "errors", "triton"}  # cli per package; client/service errors; client.triton is a client backend


def _modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        if STAGING in path.parents:  # Triton model templates: run by tritonserver, never imported as servelab.*
            continue
        parts = ["servelab", *path.relative_to(ROOT).with_suffix("").parts]
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _graph(mods: dict[str, Path]) -> dict[str, set[str]]:
    def resolve(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                subs = [f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in mods]
                names = subs + ([node.module] if len(subs) < len(node.names) else [])
            else:
                continue
            graph[mod] |= {t for t in map(resolve, (n for n in names if n.startswith("servelab"))) if t and t != mod}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(n: str) -> None:
        index[n] = low[n] = len(index)
        stack.append(n)
        for m in graph[n]:
            if m not in index:
                visit(m)
                low[n] = min(low[n], low[m])
            elif m in stack:
                low[n] = min(low[n], index[m])
        if low[n] == index[n]:
            comp = []
            while True:
                m = stack.pop()
                comp.append(m)
                if m == n:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for n in graph:
        if n not in index:
            visit(n)
    return found


def test_no_import_cycles():
    assert _cycles(_graph(_modules())) == []


def _packages(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The module graph folded into servelab's top-level packages and modules (servelab.bench, servelab.lab, …)."""
    def top(m: str) -> str:
        return ".".join(m.split(".")[:2])

    out: dict[str, set[str]] = {}
    for mod, targets in graph.items():
        out.setdefault(top(mod), set()).update(top(t) for t in targets if top(t) != top(mod))
    return out


def test_no_import_cycles_between_packages():
    assert _cycles(_packages(_graph(_modules()))) == []


def test_the_checker_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"a"}, "c": set()}
    assert _cycles(graph) == [["a", "b"]]


def test_the_package_checker_finds_a_cycle_that_no_two_modules_make():
    graph = {"servelab.bench.a": {"servelab.lab.x"}, "servelab.lab.y": {"servelab.bench.b"}, "servelab.lab.x": set(),
             "servelab.bench.b": set()}
    assert _cycles(graph) == []
    assert _cycles(_packages(graph)) == [["servelab.bench", "servelab.lab"]]


def test_module_names_are_not_reused_across_packages():
    names = Counter(m.rsplit(".", 1)[-1] for m in _modules() if m.count(".") >= 1)
    assert sorted(n for n, k in names.items() if k > 1 and n not in SAME_ROLE) == []
