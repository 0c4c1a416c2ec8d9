"""The built wheel carries what servelab reads at run time (Triton templates, review-UI templates), so the
package works outside a clone; what only a clone has is refused with one clear sentence."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from servelab.triton.repository import STAGING

ROOT = Path(__file__).resolve().parents[2]


def test_wheel_carries_the_triton_and_review_templates(tmp_path):
    src = tmp_path / "src"  # a copy, so the build leaves no build/ or egg-info in the clone
    shutil.copytree(ROOT / "servelab", src / "servelab", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(tmp_path), str(src)], check=True, timeout=300, capture_output=True)
    (wheel,) = tmp_path.glob("servelab-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    templates = [p.relative_to(ROOT).as_posix() for p in STAGING.rglob("*")
                 if p.is_file() and "__pycache__" not in p.parts]  # a byte-code cache is not a template
    assert templates, "no staging templates found"
    assert not [t for t in templates if t not in names], "templates missing from the wheel"
    assert any(n.startswith("servelab/dedup/templates/") for n in names)
    assert not any(n.startswith(("notebooks/", "tests/", "docker/")) for n in names)


def test_outside_a_clone_the_lab_says_what_it_needs(tmp_path):
    # Run servelab from a copy of the package alone (no notebooks/, docker/ beside it): an installed package.
    shutil.copytree(ROOT / "servelab", tmp_path / "site" / "servelab")
    code = ("from servelab.config import CHECKOUT, workspace; from servelab.lab import notebooks as nbs\n"
            "assert CHECKOUT is None, CHECKOUT\n"
            "print(workspace())\n"
            "try:\n    nbs.discover()\nexcept RuntimeError as exc:\n    print('refused:', exc)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env={"PYTHONPATH": str(tmp_path / "site"),
                         "PATH": "/usr/bin:/bin"}, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0] == str(tmp_path)  # made things go to the current folder
    assert "refused: this needs the course repository" in out.stdout and "clone" in out.stdout
