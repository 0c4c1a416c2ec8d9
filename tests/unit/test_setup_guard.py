"""`python -m servelab.setup_guard FILE` refuses a CPU requirements file in an environment that holds the GPU set.
The environments are real to importlib.metadata: a path entry holding the .dist-info folders pip leaves."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def environment_with(tmp_path: Path, *dists: tuple[str, str]) -> dict:
    site = tmp_path / "site"
    for name, version in dists:
        info = site / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    return {"PYTHONPATH": f"{site}:{ROOT}", "PATH": "/usr/bin:/bin"}


def guard(env: dict, requirements: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "servelab.setup_guard", str(ROOT / requirements)], env=env,
                          capture_output=True, text=True, cwd=ROOT)


def test_cpu_requirements_are_refused_over_onnxruntime_gpu(tmp_path):
    env = environment_with(tmp_path, ("onnxruntime-gpu", "1.31.1"))
    done = guard(env, "requirements.txt")
    assert done.returncode == 1
    assert "overwrite the `onnxruntime` module of the onnxruntime-gpu 1.31.1" in done.stderr
    assert "requirements-gpu.txt" in done.stderr


def test_gpu_requirements_are_fine_over_onnxruntime_gpu(tmp_path):
    assert guard(environment_with(tmp_path, ("onnxruntime-gpu", "1.31.1")), "requirements-gpu.txt").returncode == 0


def test_a_cuda_torch_is_not_replaced_by_another_pin(tmp_path):
    done = guard(environment_with(tmp_path, ("torch", "2.11.0+cu130")), "requirements.txt")
    assert done.returncode == 1 and "CUDA build torch 2.11.0+cu130" in done.stderr


@pytest.mark.parametrize("requirements", ["requirements.txt", "requirements-gpu.txt"])
def test_an_environment_without_the_gpu_set_passes(tmp_path, requirements):
    assert guard(environment_with(tmp_path, ("onnxruntime", "1.31.1")), requirements).returncode == 0
