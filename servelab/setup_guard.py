"""Refuse to install a CPU requirements file over the GPU set an environment already holds.

    python -m servelab.setup_guard requirements.txt    # exit 0: safe to install; exit 1: says what to do instead

`onnxruntime` and `onnxruntime-gpu` ship the same `onnxruntime` module: pip installing the CPU package into an
environment that has the GPU one overwrites its files and leaves a CPU-only (or broken) module. Likewise a pin
of another torch version replaces a CUDA torch build with whatever the index serves. Standard library only:
it runs before anything of the requirements file is installed.
"""

from __future__ import annotations

import re
import sys
from importlib import metadata
from pathlib import Path

# CPU package in a requirements file -> the GPU distribution it must not be laid over
GPU_TWINS = {"onnxruntime": "onnxruntime-gpu"}
_PIN = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*(?:==\s*([^\s;#]+))?")


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirements(path: Path) -> dict[str, str]:
    """{canonical name: pinned version or ""} of a requirements file (options and comments skipped)."""
    out = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line or line.startswith("-"):
            continue
        m = _PIN.match(line)
        if m:
            out[_canonical(m.group(1))] = m.group(2) or ""
    return out


def _installed(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def conflicts(path: Path) -> list[str]:
    """What installing `path` would lay over the GPU set of this environment, one sentence each."""
    wanted = requirements(path)
    found = []
    for cpu, gpu in GPU_TWINS.items():
        if cpu in wanted and _installed(gpu):
            found.append(f"{path.name} installs {cpu}, which would overwrite the `onnxruntime` module of the "
                         f"{gpu} {_installed(gpu)} installed here")
    torch = _installed("torch")
    if torch and "+cu" in torch and wanted.get("torch") and wanted["torch"] != torch.split("+")[0]:
        found.append(f"{path.name} pins torch=={wanted['torch']}, which would replace the CUDA build torch {torch} "
                     "installed here")
    return found


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m servelab.setup_guard REQUIREMENTS_FILE", file=sys.stderr)
        return 2
    found = conflicts(Path(argv[0]))
    for sentence in found:
        print(f"refusing to install: {sentence}.", file=sys.stderr)
    if found:
        print("This environment holds the GPU set: install requirements-gpu.txt into it instead, or run "
              "`make setup` with a fresh virtual environment (VENV=.venv-cpu).", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
