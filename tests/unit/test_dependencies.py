"""pyproject.toml declares what servelab imports, and the requirements files are exactly what the lock implies."""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
# Modules that exist only inside a running tritonserver (python backend) or come with Python itself.
NOT_DISTRIBUTIONS = {"triton_python_backend_utils"}
# Modules of extras the CPU lab does not install (gpu, chameleon): the distribution that provides each.
NOT_INSTALLED_HERE = {"pynvml": "nvidia-ml-py", "chi": "python-chi", "tensorrt": "tensorrt"}


def _declared() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(project["dependencies"])
    for items in project["optional-dependencies"].values():
        reqs += items
    return {canonicalize_name(Requirement(r).name) for r in reqs}


def _imported_modules() -> dict[str, str]:
    """Top-level third-party modules imported anywhere in the package, with one file that imports each."""
    found = {}
    for path in sorted((ROOT / "servelab").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top != "servelab" and top not in NOT_DISTRIBUTIONS:
                    found.setdefault(top, str(path.relative_to(ROOT)))
    return found


def test_every_imported_module_is_declared_in_pyproject():
    declared = _declared()
    providers = packages_distributions()
    missing = []
    for module, where in _imported_modules().items():
        dists = {canonicalize_name(d) for d in providers.get(module, [])}
        if not dists and module in NOT_INSTALLED_HERE:
            dists = {NOT_INSTALLED_HERE[module]}
        assert dists, f"{module} (imported in {where}) is not installed: declare it and run make lock"
        # declared directly, or shipped by a declared package's own dependency that we also declare (google -> protobuf)
        if not dists & declared:
            missing.append(f"{module} ({where}; from {sorted(dists)})")
    assert not missing, f"imported but not declared in pyproject.toml: {missing}"


def test_requirements_files_are_generated_from_the_lock():
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "lock.py"), "--check"], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr


def test_test_only_packages_stay_out_of_the_runtime_and_image_sets():
    test_only = {"pytest", "pytest-timeout", "playwright", "kubernetes", "ruff"}
    for name in ["requirements.txt", "requirements-gpu.txt", "docker/requirements-service.txt",
                 "docker/requirements-export.txt"]:
        pins = {canonicalize_name(line.split("==")[0]) for line in (ROOT / name).read_text().splitlines()
                if line and not line.startswith("#")}
        assert not pins & test_only, f"{name} carries test-only packages {sorted(pins & test_only)}"


def test_gpu_set_has_onnxruntime_gpu_and_never_both_builds():
    pins = {canonicalize_name(line.split("==")[0]) for line in (ROOT / "requirements-gpu.txt").read_text().splitlines()
            if line and not line.startswith("#")}
    assert "onnxruntime-gpu" in pins and "onnxruntime" not in pins  # one `onnxruntime` module per environment
