"""tests/deploy: offline validation of docker/, k8s/, scripts/ and servelab/provision (no Docker engine)."""

from __future__ import annotations

import shutil
import subprocess

from servelab.config import CHECKOUT as REPO_ROOT  # the tests run from a clone
from servelab.triton.repository import STAGING

DEPLOY_NOTES: list[str] = []


def compose_plugin() -> str | None:
    """`docker compose version` output when a compose plugin is present, else None."""
    if not shutil.which("docker"):
        return None
    try:
        out = subprocess.run(["docker", "compose", "version"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def pytest_terminal_summary(terminalreporter):
    if DEPLOY_NOTES:
        terminalreporter.section("deploy validation (offline)")
        for line in dict.fromkeys(DEPLOY_NOTES):
            terminalreporter.write_line(line)
        terminalreporter.write_line("GPU paths were validated offline only: no GPU and no Docker engine ran them here.")


__all__ = ["REPO_ROOT", "DEPLOY_NOTES", "compose_plugin"]


import pytest  # noqa: E402


@pytest.fixture(scope="session")
def gpu_models() -> set[str]:
    """Model names in servelab/triton/staging/gpu (Triton's GPU-node repository templates)."""
    root = STAGING / "gpu"
    return {p.name for p in root.iterdir() if (p / "config.pbtxt").is_file()}


@pytest.fixture(scope="session")
def gpu_trt_cache_path(gpu_models) -> str:
    """The TensorRT cache volume in the GPU templates (engines, named after the export, and timing cache)."""
    from servelab.triton.repository import parse_config

    cfg = parse_config(STAGING / "gpu" / "openclip_vit_b32_trt" / "config.pbtxt")
    for acc in cfg.optimization.execution_accelerators.gpu_execution_accelerator:
        if acc.name == "tensorrt":
            return acc.parameters["trt_engine_cache_path"]
    pytest.fail("openclip_vit_b32_trt has no tensorrt accelerator")
