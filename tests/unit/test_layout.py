"""The top level a student looks at first: `models_staging/` (the Triton model templates) and `data/` (where
the photos a lesson serves live), each pointing at the one real copy rather than holding a second one."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from servelab.triton.repository import STAGING

ROOT = Path(__file__).resolve().parents[2]


def test_models_staging_is_the_package_templates_not_a_copy():
    link = ROOT / "models_staging"
    assert link.is_symlink(), "models_staging/ must point at servelab/triton/staging, not copy it"
    assert not Path(os.readlink(link)).is_absolute(), "a relative link keeps working in any clone or image"
    assert link.resolve() == STAGING.resolve()
    assert (link / "cpu" / "openclip_vit_b32_cpu" / "config.pbtxt").is_file()


def test_git_stores_models_staging_as_a_link():
    out = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-s", "models_staging"], capture_output=True,
                         text=True)
    if out.returncode != 0 or not out.stdout:
        return  # not a git checkout (an image's copy): the link itself is checked above
    assert out.stdout.split()[0] == "120000", out.stdout  # a symlink entry, not the folder's files


def test_data_holds_no_photos_and_names_where_the_lessons_write_them():
    data = ROOT / "data"
    readme = (data / "README.md").read_text()
    tracked = subprocess.run(["git", "-C", str(ROOT), "ls-files", "data"], capture_output=True, text=True)
    if tracked.returncode == 0 and tracked.stdout:
        assert set(tracked.stdout.split()) == {"data/.gitignore", "data/README.md"}
    # notebook 09 writes its photo folder with the run; the README must name that same place
    capstone = (ROOT / "notebooks" / "09_capstone_duplicates.py").read_text()
    assert re.search(r'out_dir / "capstone" / "photos"', capstone), "notebook 09 moved its photos: update data/README.md"
    assert "capstone/photos/" in readme
    assert "results/dedup_eval/images/" in readme
