"""pyproject.toml declares what servelab imports, the requirements files are exactly what the lock implies, with
hashes, and each set resolves for the machines it is meant for."""

from __future__ import annotations

import ast
import importlib.util
import json
import re
import subprocess
import sys
import tomllib
import urllib.request
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
# Modules that exist only inside a running tritonserver (python backend) or come with Python itself.
NOT_DISTRIBUTIONS = {"triton_python_backend_utils"}
# Modules of extras the CPU lab does not install (gpu, chameleon): the distribution that provides each.
NOT_INSTALLED_HERE = {"pynvml": "nvidia-ml-py", "chi": "python-chi", "tensorrt": "tensorrt"}


def _lock_script():
    spec = importlib.util.spec_from_file_location("servelab_lock_script", ROOT / "scripts" / "lock.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


lock = _lock_script()


def pins(name: str) -> dict[str, str]:
    """{canonical name: version} of the requirement lines of a requirements file (options, extras and hashes
    skipped)."""
    out = {}
    for line in (ROOT / name).read_text().splitlines():
        if line and not line[0].isspace() and not line.startswith(("#", "-")):
            req = Requirement(line.split()[0])
            out[canonicalize_name(req.name)] = str(req.specifier).removeprefix("==")
    return out


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
                 "docker/requirements-export.txt", "docker/requirements-triton.txt"]:
        found = set(pins(name)) & test_only
        assert not found, f"{name} carries test-only packages {sorted(found)}"


def test_gpu_set_has_onnxruntime_gpu_and_never_both_builds():
    gpu = pins("requirements-gpu.txt")
    assert "onnxruntime-gpu" in gpu and "onnxruntime" not in gpu  # one `onnxruntime` module per environment


def test_gpu_set_pins_torch_cuda_build_and_every_cuda_wheel():
    gpu = pins("requirements-gpu.txt")
    cuda = {n for n in gpu if n.startswith(("nvidia-", "cuda-")) or n == "triton"} - {"nvidia-ml-py", "nvidia-pytriton"}
    # onnxruntime-gpu's CUDA provider loads libcurand; torch's CUDA build brings it with its CUDA toolkit wheels
    assert {"nvidia-curand", "nvidia-cublas", "nvidia-cudnn-cu13", "cuda-toolkit"} <= cuda
    assert all(gpu[n] for n in cuda) and gpu["torch"] == "2.13.0"
    for cpu_set in ("requirements.txt", "requirements-test.txt", "requirements-chameleon.txt"):
        # the test set goes on top of either lab set: torch's CUDA libraries belong to the GPU set alone
        assert not cuda & set(pins(cpu_set)), f"{cpu_set} must not carry CUDA wheels (several GB on a CPU machine)"


def test_every_requirement_carries_a_hash_and_the_cpu_torch_only_its_cpu_build():
    for name in lock.OUTPUTS:
        assert not lock.unhashed((ROOT / name).read_text()), name
    locked = lock.read_lock()["torch"]["wheels"]
    cpu_lab = (ROOT / "requirements.txt").read_text()
    for wheel, sha in locked.items():
        if "cp311" in wheel and "x86_64" in wheel:
            assert (sha in cpu_lab) == ("+cpu" in wheel), f"requirements.txt and {wheel}"
    assert lock.TORCH_CPU_INDEX in cpu_lab


def test_a_requirement_without_a_hash_is_found():
    text = "a==1 \\\n    --hash=sha256:00\nb==2\n--find-links x\n"
    assert lock.unhashed(text) == ["b==2"]


def _index_answers() -> str | None:
    try:
        urllib.request.urlopen(f"{lock.PYPI_SIMPLE}/pip/", timeout=15).close()
    except OSError as e:
        return f"the package index {lock.PYPI_SIMPLE} does not answer ({e}): cannot resolve the sets"
    return None


@pytest.mark.timeout(900)
@pytest.mark.parametrize("name,target", [("requirements.txt", lock.CPU_LAB), ("requirements-gpu.txt", lock.GPU_NODE)],
                         ids=["cpu-lab-py3.11", "gpu-node-py3.12"])
def test_set_resolves_for_its_target_without_installing(tmp_path, name, target):
    """pip resolves the file for the target's Python and platform, hashes required; dependencies are resolved too
    (no --no-deps), so a package the set lacks or a version that does not fit fails here, as `pip check` would."""
    reason = _index_answers()
    if reason:
        pytest.skip(reason)
    report = tmp_path / "report.json"
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
                           "--require-hashes", "--disable-pip-version-check", "--target", str(tmp_path / "t"),
                           "--report", str(report), *target.pip_options(), "-r", str(ROOT / name)],
                          capture_output=True, text=True, cwd=tmp_path, timeout=840)
    assert done.returncode == 0, done.stderr[-3000:]
    chosen = {canonicalize_name(i["metadata"]["name"]): i["metadata"]["version"]
              for i in json.loads(report.read_text())["install"]}
    assert {n: v.split("+")[0] for n, v in chosen.items()} == pins(name)
    assert ("+cpu" in chosen["torch"]) == (target.build == "cpu")


def test_scripts_read_bare_pins_out_of_the_hashed_requirements():
    """A pin line of a hashed requirements file continues with ` \\` and its --hash lines: the stand-in images'
    script must take `name==version` alone from it (the whole line made pip's install fail inside the image)."""
    script = (ROOT / "scripts/standin_images.sh").read_text()
    assignments = [line for line in script.splitlines() if re.match(r"^[A-Z_]+_PIN=\$\(grep", line)]
    assert len(assignments) == 4
    shown = subprocess.run(["bash", "-c", "\n".join(assignments) + '\necho "$PYTRITON_PIN|$ORT_PIN|$NUMPY_PIN|$PILLOW_PIN"'],
                           cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    for pin in shown.split("|"):
        assert re.fullmatch(r"[A-Za-z0-9_.-]+==[0-9][0-9A-Za-z.+]*", pin), pin
