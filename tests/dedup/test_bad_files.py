"""Every kind of file the finder cannot use gets a catalog row with a reason, and the scan carries on.

Permission checks need a process that obeys file modes: when the tests run as root, the scan runs in a child
process whose capability bounding set lacks CAP_DAC_OVERRIDE / CAP_DAC_READ_SEARCH (util-linux `setpriv`),
so mode 000 really means "permission denied" — the same error a normal user gets.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import sys

import pytest
from PIL import Image

from servelab.data import encode, synthetic_photo
from servelab.dedup.catalog import default_catalog

from .conftest import cli


def _build(root):
    root.mkdir()
    good = encode(synthetic_photo(5, (200, 150)))
    (root / "good.jpg").write_bytes(good)
    (root / "truncated.jpg").write_bytes(good[: len(good) // 3])
    (root / "notes.jpg").write_text("this is not a photo\n")
    (root / "empty.png").write_bytes(b"")
    (root / "readme.txt").write_text("hello")
    Image.new("RGB", (20, 20), "red").save(root / "really_a_gif.png", format="GIF")
    (root / "locked.jpg").write_bytes(good)
    os.chmod(root / "locked.jpg", 0)
    (root / "locked_dir").mkdir()
    (root / "locked_dir" / "inside.jpg").write_bytes(good)
    os.chmod(root / "locked_dir", 0)
    (root / "sub").mkdir()
    (root / "sub" / "also_good.png").write_bytes(encode(synthetic_photo(6, (120, 90)), "PNG"))
    os.symlink("..", root / "sub" / "loop")  # a folder link back to an ancestor
    os.symlink("self_link", root / "self_link")  # a link to itself
    os.symlink("does_not_exist.jpg", root / "dangling.jpg")
    os.symlink("/etc/hostname", root / "outside.jpg")
    return {
        "truncated.jpg": ("error", "corrupt"),
        "notes.jpg": ("error", "not_an_image"),
        "empty.png": ("error", "empty"),
        "readme.txt": ("skipped", "unsupported_type"),
        "really_a_gif.png": ("skipped", "unsupported_type"),
        "locked.jpg": ("error", "permission_denied"),
        "locked_dir/": ("error", "permission_denied"),
        "sub/loop": ("skipped", "symlink_loop"),
        "self_link": ("skipped", "symlink_loop"),
        "dangling.jpg": ("skipped", "broken_symlink"),
        "outside.jpg": ("skipped", "symlink_outside_root"),
    }


def _scan_obeying_permissions(root):
    args = ["scan", root, "--json", "--no-progress"]
    if os.geteuid() != 0:
        return cli(*args)
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without util-linux setpriv: cannot create a real permission-denied case")
    import subprocess

    proc = subprocess.run([setpriv, "--bounding-set=-dac_override,-dac_read_search", "--", sys.executable, "-m",
                           "servelab.cli", "dedup", *map(str, args)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc


def test_every_bad_file_kind_is_recorded_with_its_reason(tmp_path):
    root = tmp_path / "photos"
    expected = _build(root)
    try:
        report = json.loads(_scan_obeying_permissions(root).stdout)
    finally:
        os.chmod(root / "locked.jpg", 0o644)
        os.chmod(root / "locked_dir", 0o755)
    got = {p["path"]: (p["status"], p["kind"]) for p in report["problems"]}
    assert got == expected
    assert all(p["reason"] for p in report["problems"])
    db = sqlite3.connect(default_catalog(root))
    rows = {r[0]: r[1:] for r in db.execute("SELECT path, status, kind, reason FROM files")}
    assert rows["good.jpg"][0] == "ok" and rows["sub/also_good.png"][0] == "ok"  # the scan went on
    for path, (status, kind) in expected.items():
        assert rows[path][:2] == (status, kind), path
    assert "permission denied" in rows["locked.jpg"][2] and "loop" in rows["sub/loop"][2]
    assert "truncated" in rows["truncated.jpg"][2] and ".txt" in rows["readme.txt"][2]
    # nothing outside the root was catalogued, and the loop did not make the walk revisit the tree
    assert not any(p.startswith("sub/loop/") for p in rows)

    # the problems command lists the same rows, one line each
    lines = cli("problems", root).stdout.strip().splitlines()
    assert len(lines) == len(expected) and any("locked.jpg" in ln and "permission" in ln for ln in lines)
