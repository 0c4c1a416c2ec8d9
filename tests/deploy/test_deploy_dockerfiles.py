"""Every docker/Dockerfile*: pinned base images, a non-root USER, a HEALTHCHECK that works, COPY sources that
exist in the build context (and are not excluded by .dockerignore), and the requirement pins behind them."""

from __future__ import annotations

import fnmatch
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.deploy.conftest import REPO_ROOT

DOCKERFILES = sorted((REPO_ROOT / "docker").glob("Dockerfile*"))
SERVICE_IMAGES = {"Dockerfile", "Dockerfile.gpu", "Dockerfile.triton"}  # all three run long-lived servers


def instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with line continuations joined and comments dropped."""
    out, buf = [], ""
    for line in path.read_text().splitlines():
        if not buf and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if buf and line.lstrip().startswith("#"):
            continue
        buf += line.rstrip()[:-1] + " " if line.rstrip().endswith("\\") else line
        if not line.rstrip().endswith("\\"):
            op, _, args = buf.strip().partition(" ")
            out.append((op.upper(), args.strip()))
            buf = ""
    return out


def dockerignore() -> list[str]:
    lines = (REPO_ROOT / ".dockerignore").read_text().splitlines()
    return [ln.strip() for ln in lines if ln.strip() and not ln.startswith("#")]


def ignored(rel: str) -> bool:
    first = rel.strip("/").split("/")[0]
    return any(not p.startswith("!") and (fnmatch.fnmatch(rel, p) or fnmatch.fnmatch(first, p)) for p in dockerignore())


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_base_images_pinned(path):
    stages = set()
    for op, args in instructions(path):
        if op != "FROM":
            continue
        words = [w for w in args.split() if not w.startswith("--")]
        image = words[0]
        if len(words) >= 3 and words[1].upper() == "AS":
            stages.add(words[2])
        if image in stages:
            continue
        assert "$" not in image, f"{image}: base image chosen by ARG cannot be checked"
        name, _, tag = image.rpartition(":")
        assert name and tag and tag != "latest" and re.search(r"\d", tag), f"{path.name}: {image} is not pinned"
        assert "@sha256:" in image or re.search(r"\d+\.\d+", tag), f"{path.name}: {image} needs a version tag"


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_final_stage_runs_as_non_root(path):
    ins = instructions(path)
    last_from = max(i for i, (op, _) in enumerate(ins) if op == "FROM")
    users = [args for op, args in ins[last_from:] if op == "USER"]
    assert users, f"{path.name}: final stage has no USER"
    assert users[-1].split(":")[0] not in ("root", "0"), f"{path.name}: runs as {users[-1]}"


@pytest.mark.parametrize("path", [p for p in DOCKERFILES if p.name in SERVICE_IMAGES], ids=lambda p: p.name)
def test_service_images_have_a_healthcheck(path):
    checks = [args for op, args in instructions(path) if op == "HEALTHCHECK"]
    assert checks and "CMD" in checks[-1]
    script = re.search(r'"(/opt/servelab[^"]*\.py)"', checks[-1]).group(1)
    # the script the HEALTHCHECK runs is copied into the image at that path
    copies = [args.split() for op, args in instructions(path) if op == "COPY"]
    explicit = any(Path(script).name in " ".join(c) and c[-1].rstrip("/") in (str(Path(script).parent), script)
                   for c in copies)
    whole_context = any(c[-2:] == [".", "/opt/servelab"] for c in copies) and not ignored("docker")
    assert explicit or whole_context, f"{script} is not copied into the image"
    assert (REPO_ROOT / "docker" / Path(script).name).is_file()
    assert "curl" not in checks[-1] and "wget" not in checks[-1]


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_copy_sources_exist_in_build_context(path):
    for op, args in instructions(path):
        if op not in ("COPY", "ADD"):
            continue
        assert op == "COPY", f"{path.name}: use COPY, not ADD"
        if "--from=" in args:
            continue
        words = [w for w in args.split() if not w.startswith("--")]
        for src in words[:-1]:
            if src == ".":
                continue
            assert (REPO_ROOT / src).exists(), f"{path.name}: COPY source {src} does not exist"
            assert not ignored(src), f"{path.name}: COPY source {src} is excluded by .dockerignore"


def test_entrypoint_is_executable_and_model_never_in_context():
    assert os.access(REPO_ROOT / "docker" / "entrypoint.sh", os.X_OK)
    out = subprocess.run(["git", "ls-files", "-s", "docker/entrypoint.sh", "scripts/node_bootstrap.sh"],
                         cwd=REPO_ROOT, capture_output=True, text=True)
    if out.stdout:  # committed: the mode git stores is what a clone (and the image) gets
        assert all(line.startswith("100755") for line in out.stdout.splitlines()), out.stdout
    for path in ("artifacts", "models", "results", ".venv", ".git"):
        assert ignored(path), f".dockerignore should exclude {path}"


def test_preflight_refuses_missing_or_mismatched_export(tmp_path, onnx_meta):
    script = REPO_ROOT / "docker" / "preflight.py"
    base = {k: v for k, v in os.environ.items() if not k.startswith("SERVELAB_")}
    env = {**base, "PYTHONPATH": str(REPO_ROOT)}

    def run(**extra):
        return subprocess.run([sys.executable, str(script)], env={**env, **extra}, capture_output=True, text=True,
                              timeout=60)

    missing = run(SERVELAB_ARTIFACTS=str(tmp_path))
    assert missing.returncode == 2 and "no ONNX export" in missing.stderr and "EXPORT_AT_BUILD" in missing.stderr
    ok = run(SERVELAB_ARTIFACTS=str(Path(onnx_meta["path"]).parent))
    assert ok.returncode == 0, ok.stderr
    other = run(SERVELAB_ARTIFACTS=str(Path(onnx_meta["path"]).parent), SERVELAB_SEED="12345")
    assert other.returncode == 2 and "settings ask for" in other.stderr
    allowed = run(SERVELAB_ARTIFACTS=str(tmp_path), SERVELAB_EXPORT_ON_START="1")
    assert allowed.returncode == 0


def test_preflight_refuses_a_gpu_provider_without_a_gpu(onnx_meta):
    """The GPU image run without a GPU says so in one line and exits non-zero (instead of answering 500s)."""
    script = REPO_ROOT / "docker" / "preflight.py"
    sys.path.insert(0, str(script.parent))
    try:
        import preflight
    finally:
        sys.path.remove(str(script.parent))
    if preflight.gpu_visible():
        pytest.skip("this machine has a GPU: the refusal is for machines without one")
    base = {k: v for k, v in os.environ.items() if not k.startswith("SERVELAB_")}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60,
                         env={**base, "PYTHONPATH": str(REPO_ROOT), "SERVELAB_PROVIDER": "cuda",
                              "SERVELAB_ARTIFACTS": str(Path(onnx_meta["path"]).parent)})
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and "sees no GPU" in out.stderr and "SERVELAB_PROVIDER=cpu" in out.stderr


def test_healthcheck_script_against_a_real_service(onnx_meta):
    from servelab.service.process import ServiceProcess

    script = REPO_ROOT / "docker" / "healthcheck.py"
    with ServiceProcess(env={"SERVELAB_WARMUP_ITERS": "1"}) as svc:
        up = subprocess.run([sys.executable, str(script)], env={**os.environ, "SERVELAB_PORT": str(svc.port)},
                            capture_output=True, text=True, timeout=30)
        assert up.returncode == 0, up.stderr
        port = svc.port
    down = subprocess.run([sys.executable, str(script)], env={**os.environ, "SERVELAB_PORT": str(port)},
                          capture_output=True, text=True, timeout=30)
    assert down.returncode == 1 and "readyz failed" in down.stderr


def _pip_installs(path: Path) -> list[str]:
    """The RUN instructions of a Dockerfile that install requirements files."""
    return [args for op, args in instructions(path) if op == "RUN" and "pip install" in args and " -r " in args]


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_images_install_generated_hashed_files_as_make_setup_does(path):
    """Every requirements install is --no-deps --require-hashes of files generated from the lock, followed by
    `pip check` (except NVIDIA's Triton image, whose own packages are not in the lock)."""
    sys.path.insert(0, str(REPO_ROOT / "scripts"))
    try:
        from lock import OUTPUTS, unhashed
    finally:
        sys.path.remove(str(REPO_ROOT / "scripts"))
    copied = {Path(w).name: w for op, args in instructions(path) if op == "COPY" and "--from=" not in args
              for w in args.split()[:-1] if not w.startswith("--")}
    runs = _pip_installs(path)
    assert runs or path.name == "Dockerfile.triton" or "pip install" not in path.read_text()
    for run in runs:
        for command in run.split("&&"):
            if "pip install" not in command or " -r " not in command:
                continue
            assert "--no-deps" in command and "--require-hashes" in command, f"{path.name}: {command.strip()}"
            for target in re.findall(r"-r\s+(\S+)", command):
                source = copied.get(Path(target).name)
                assert source in OUTPUTS, f"{path.name}: {target} is not a requirements file generated from the lock"
                assert not unhashed((REPO_ROOT / source).read_text()), f"{source} has lines without hashes"
        if path.name != "Dockerfile.triton":
            assert "pip check" in run, f"{path.name}: no `pip check` after installing with --no-deps"
