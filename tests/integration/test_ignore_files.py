"""Secrets and build outputs stay out of clones and images: git itself reads .gitignore, and reads .dockerignore's
patterns the same way in a scratch repository (for these patterns the two syntaxes agree)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SECRETS = ["CHI-231234-openrc.sh", "notebooks/chameleon-openrc.sh", "app-cred-openrc", "key.pem", "tls/server.key",
           "id_rsa", "keys/id_ed25519", "docker/.env"]
BUILT = ["build/gpu-wheels/part-01/x.whl", "build/docker-engine.log"]
KEPT = ["servelab/service/app.py", "pyproject.toml", "docker/Dockerfile", "docker/entrypoint.sh"]


def ignored(root: Path, paths: list[str]) -> set[str]:
    """The paths git would leave out under `root`'s .gitignore (whether or not they exist)."""
    out = subprocess.run(["git", "-C", str(root), "check-ignore", "--no-index", "--stdin"], input="\n".join(paths),
                         capture_output=True, text=True)
    assert out.returncode in (0, 1), out.stderr  # 1: none of them is ignored
    return set(out.stdout.split())


@pytest.fixture
def docker_context(tmp_path) -> Path:
    """A scratch repository whose .gitignore is the repository's .dockerignore."""
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    shutil.copy(REPO / ".dockerignore", tmp_path / ".gitignore")
    return tmp_path


def test_gitignore_keeps_secrets_and_build_outputs_out_of_clones():
    assert ignored(REPO, SECRETS + BUILT + KEPT) == set(SECRETS + BUILT)


def test_dockerignore_keeps_secrets_and_build_outputs_out_of_images(docker_context):
    assert ignored(docker_context, SECRETS + BUILT + KEPT) == set(SECRETS + BUILT)
