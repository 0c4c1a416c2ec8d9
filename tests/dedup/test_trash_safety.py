"""The trash with real processes and real file systems: a second process waits for the folder lock, a move to
another file system killed mid-copy loses nothing, created folders and files keep the photo folder's privacy,
undo goes past a file it cannot restore, and a malformed manifest line is skipped with a warning.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from servelab.data import encode, synthetic_photo
from servelab.dedup import Catalog, scan
from servelab.dedup.catalog import default_catalog
from servelab.dedup.lock import lock_path
from servelab.dedup.trash import batches, manifest_path, manifest_problems, recover, restore, trash_files

from .conftest import cli

SHM = Path("/dev/shm")


def _md5(p: Path) -> str:
    return hashlib.md5(p.read_bytes()).hexdigest()


def _mode(p: Path) -> int:
    return stat.S_IMODE(os.stat(p).st_mode)


def _folder(root: Path, names=("a.jpg", "album/b.jpg", "album/c.jpg")) -> dict[str, int]:
    """Small photos under `root`, scanned; returns {path: catalog id}."""
    for k, name in enumerate(names):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(encode(synthetic_photo(300 + k, (64, 48))))
    scan(root, default_catalog(root))
    with Catalog(default_catalog(root)) as cat:
        return {r["path"]: r["id"] for r in cat.files("ok")}


@pytest.fixture
def other_fs(tmp_path):
    """A folder on another file system than tmp_path (/dev/shm is a tmpfs on Linux), removed afterwards."""
    if not SHM.is_dir() or os.stat(SHM).st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("needs /dev/shm on a file system other than the temporary folder's")
    folder = SHM / f"servelab-test-{os.getpid()}-{tmp_path.name}"
    yield folder
    subprocess.run(["rm", "-rf", str(folder)], check=False)


HOLDER = textwrap.dedent("""
    import sys
    from servelab.dedup import Catalog
    from servelab.dedup.lock import folder_lock

    with Catalog(sys.argv[1]) as cat, folder_lock(cat):
        print("held", flush=True)
        sys.stdin.read()  # hold until the test closes stdin
""")


def test_a_second_process_waits_for_the_lock_then_says_who_holds_it(tmp_path):
    root = tmp_path / "photos"
    ids = _folder(root)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(default_catalog(root))], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        for args in (("delete", ids["a.jpg"], "--root", root), ("undo", "--root", root), ("trash", root),
                     ("scan", root, "--no-progress")):
            proc = cli(*args, "--lock-wait", "0.5", check=False)
            lines = proc.stderr.strip().splitlines()
            assert proc.returncode == 1 and len(lines) == 1, (args, proc.stderr)
            assert lines[0].startswith("error: the photo folder is busy: ") and f"process {holder.pid} " in lines[0]
            assert str(lock_path(Catalog(default_catalog(root)))) in lines[0]
        assert (root / "a.jpg").is_file() and not manifest_path(Catalog(default_catalog(root))).exists()
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
    assert holder.returncode == 0
    proc = cli("delete", ids["a.jpg"], "--root", root, "--lock-wait", "0.5")  # released: it goes through
    assert "moved 1 file(s)" in proc.stdout and not (root / "a.jpg").exists()


CROSS_DEVICE_KILL = textwrap.dedent("""
    import resource, signal, sys
    from servelab.dedup import Catalog
    from servelab.dedup.trash import trash_files

    catalog, file_id, limit, how = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    if how == "killed":  # the kernel kills the process mid-write (Python ignores SIGXFSZ unless told otherwise;
        signal.signal(signal.SIGXFSZ, signal.SIG_DFL)  # ignored, the write fails with EFBIG as on a full disk)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))  # no file of this process grows past `limit` bytes
    with Catalog(catalog) as cat:
        trash_files(cat, [file_id], note="cross-device test")
""")


@pytest.mark.parametrize("how", ["killed", "full"])
def test_a_move_to_another_file_system_cut_short_leaves_the_source_and_no_truncated_copy(tmp_path, other_fs, how):
    """The kernel stops the copy part-way (RLIMIT_FSIZE: killed by SIGXFSZ, or EFBIG as from a full disk)."""
    root = tmp_path / "photos"
    root.mkdir()
    noise = np.random.default_rng(0).integers(0, 256, (700, 700, 3), dtype=np.uint8)
    Image.fromarray(noise).save(root / "big.png")  # ~1.5 MB that PNG cannot compress
    size = (root / "big.png").stat().st_size
    limit = 256 * 1024
    assert size > 4 * limit
    digest = _md5(root / "big.png")
    cat_path = default_catalog(root)
    scan(root, cat_path)
    with Catalog(cat_path) as cat:
        cat.set_meta("trash_dir", str(other_fs / "trash"))
        fid = cat.files("ok")[0]["id"]
    child = subprocess.run([sys.executable, "-c", CROSS_DEVICE_KILL, str(cat_path), str(fid), str(limit), how],
                           capture_output=True, text=True, timeout=120)
    if how == "killed":
        assert child.returncode == -signal.SIGXFSZ, child.stderr
    else:
        assert child.returncode == 1 and "File too large" in child.stderr, child.stderr

    assert _md5(root / "big.png") == digest  # the source is untouched
    finals = [p for p in (other_fs / "trash").rglob("big.png")]
    assert finals == [], "a file appeared at its final name in the trash before it was complete"
    partial = [p for p in (other_fs / "trash").rglob("*") if p.is_file() and p.name != "manifest.jsonl"]
    assert len(partial) == (how == "killed")  # a killed copy leaves its temporary file, and only that
    with Catalog(cat_path) as cat:
        done = recover(cat)
        assert done["in_place"] == 1 and not done["conflicts"]
        assert cat.file(fid)["status"] == "ok"
        assert not [p for p in cat.trash_dir.rglob("*") if p.is_file() and p != manifest_path(cat)]
        # and with room to write, the same move goes through and back, byte-identical
        res = trash_files(cat, [fid])
        moved = cat.trash_dir / res["files"][0]["trash"]
        assert _md5(moved) == digest and not (root / "big.png").exists()
        restore(cat)
    assert _md5(root / "big.png") == digest


@pytest.mark.parametrize("where", ["same file system", "another file system"])
def test_created_folders_and_files_are_no_wider_than_the_photo_folder(tmp_path, request, where):
    old = os.umask(0o022)  # a usual umask: without care the trash would come out 0755 and the catalog 0644
    try:
        root = tmp_path / "photos"
        (root / "album").mkdir(parents=True)
        (root / "album" / "b.jpg").write_bytes(encode(synthetic_photo(5, (64, 48))))
        (root / "a.jpg").write_bytes(encode(synthetic_photo(6, (64, 48))))
        os.chmod(root / "album", 0o750)
        os.chmod(root / "album" / "b.jpg", 0o640)
        os.chmod(root / "a.jpg", 0o600)
        os.chmod(root, 0o700)
        scan(root, default_catalog(root))
        state = root / ".servelab"
        assert _mode(state) == 0o700 and _mode(default_catalog(root)) == 0o600
        with Catalog(default_catalog(root)) as cat:
            if where == "another file system":
                cat.set_meta("trash_dir", str(request.getfixturevalue("other_fs") / "private" / "trash"))
            ids = {r["path"]: r["id"] for r in cat.files("ok")}
            res = trash_files(cat, [ids["a.jpg"], ids["album/b.jpg"]])
            trash, batch = cat.trash_dir, cat.trash_dir / res["batch"]
            for folder in [trash, batch] + ([trash.parent] if where != "same file system" else []):
                assert _mode(folder) == 0o700, folder
            assert _mode(batch / "album") == 0o750  # the folder the photo came from
            assert _mode(batch / "a.jpg") == 0o600 and _mode(batch / "album" / "b.jpg") == 0o640
            assert _mode(manifest_path(cat)) == 0o600 and _mode(lock_path(cat)) == 0o600
            # undo into a folder that is gone recreates it with the mode it had
            (root / "album").rmdir()
            restore(cat)
        assert _mode(root / "album") == 0o750 and _mode(root / "album" / "b.jpg") == 0o640
        assert _mode(root / "a.jpg") == 0o600
    finally:
        os.umask(old)


def test_undo_goes_past_a_file_it_cannot_restore_and_names_it(tmp_path):
    root = tmp_path / "photos"
    ids = _folder(root)
    digests = {p: _md5(root / p) for p in ids}
    proc = cli("delete", *ids.values(), "--root", root)
    assert "moved 3 file(s)" in proc.stdout
    (root / "album").mkdir(exist_ok=True)
    (root / "album" / "b.jpg").write_bytes(b"something new at the old path")  # the first file's path is taken
    with Catalog(default_catalog(root)) as cat:
        batch = batches(cat)[0]
        victim = next(f for f in batch["files"] if f["original"] == "album/c.jpg")
        (cat.trash_dir / victim["trash"]).unlink()  # and another is gone from the trash
    proc = cli("undo", "--root", root, check=False)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: could not restore 2 file(s) of batch")
    assert "album/b.jpg: its path is taken again" in lines[0] and "album/c.jpg: " in lines[0]
    assert "restored 1 file(s)" in proc.stdout
    assert _md5(root / "a.jpg") == digests["a.jpg"]  # the good file came back all the same
    assert (root / "album" / "b.jpg").read_bytes() == b"something new at the old path"  # nothing overwritten
    with Catalog(default_catalog(root)) as cat:
        assert batches(cat)[0]["in_trash"] == 2


def test_a_malformed_manifest_line_is_reported_and_skipped(tmp_path):
    root = tmp_path / "photos"
    ids = _folder(root)
    cli("delete", ids["a.jpg"], "--root", root)
    with Catalog(default_catalog(root)) as cat:
        path = manifest_path(cat)
    good = path.read_text()
    bad = [json.dumps({"op": "trash", "batch": "x"}), json.dumps({"op": "moved", "file_id": "seven"}), "[1, 2]",
           '{"op": "tra']
    path.write_text(bad[0] + "\n" + good + "\n".join(bad[1:]) + "\n")
    proc = cli("trash", root)
    warnings = proc.stderr.strip().splitlines()
    assert len(warnings) == 4 and all(w.startswith(f"warning: {path} line ") for w in warnings), proc.stderr
    assert "line 1 skipped: 'trash' record without a valid 'file_id'" in warnings[0]
    assert "1 file(s), 1 still in the trash" in proc.stdout  # the good records still count
    with Catalog(default_catalog(root)) as cat:
        assert len(manifest_problems(cat)) == 4
        restore(cat)
    assert (root / "a.jpg").is_file()


def test_the_folder_lock_is_released_when_its_holder_is_killed(tmp_path):
    """flock belongs to the process: a crash never leaves the folder locked."""
    root = tmp_path / "photos"
    ids = _folder(root)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(default_catalog(root))], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    holder.kill()
    holder.wait(timeout=30)
    holder.stdin.close()
    proc = cli("delete", ids["a.jpg"], "--root", root, "--lock-wait", "0")
    assert "moved 1 file(s)" in proc.stdout

