"""Faults with real processes: the model server dies in the middle of `servelab dedup embed`, and the
process moving files to the trash is killed in the middle of a batch.

Each must leave something a rerun (or the next command) finishes: every photo embedded exactly once, every
file either in place or in the trash with a manifest entry, and undo restoring everything byte-identically.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from servelab.data import encode, synthetic_photo
from servelab.dedup import Catalog, scan
from servelab.dedup.catalog import default_catalog
from servelab.dedup.trash import batches, manifest_path, read_manifest, restore, trash_files

from .conftest import cli


def _photos(root: Path, n: int, seed: int) -> Path:
    root.mkdir(parents=True)
    for i in range(n):
        (root / f"p{i:03d}.jpg").write_bytes(encode(synthetic_photo(seed + i, (96, 72))))
    scan(root, default_catalog(root))
    return default_catalog(root)


def _embedded(cat_path: Path) -> int:
    db = sqlite3.connect(cat_path, timeout=30)
    try:
        return db.execute("SELECT COUNT(*) FROM files WHERE status='ok' AND embedding IS NOT NULL").fetchone()[0]
    finally:
        db.close()


def _embed_cli(root: Path, url: str, backend: str = "fastapi") -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "servelab.cli", "dedup", "embed", str(root), "--mode", "remote",
                             "--backend", backend, "--url", url, "--batch-size", "1", "--no-progress"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _kill_mid_run(embed: subprocess.Popen, cat_path: Path, kill, total: int) -> int:
    """Let a few batches commit, kill the server, and return how many photos were embedded by then."""
    deadline = time.monotonic() + 120
    while _embedded(cat_path) < 3:
        assert embed.poll() is None, f"embed ended before the kill: {embed.communicate()}"
        assert time.monotonic() < deadline, "no batch was committed within 120 s"
        time.sleep(0.02)
    kill()
    out, err = embed.communicate(timeout=120)
    done = _embedded(cat_path)
    assert embed.returncode == 1, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: embedding stopped: "), err
    assert f"{done} photos embedded and saved in this run (0 before), {total - done} left" in lines[0]
    assert "rerun `servelab dedup embed`" in lines[0]
    assert 3 <= done < total
    return done


def _rerun_finishes(root: Path, url: str, done: int, total: int, backend: str = "fastapi") -> None:
    embed = _embed_cli(root, url, backend)
    out, err = embed.communicate(timeout=300)
    assert embed.returncode == 0, err
    assert out.startswith(f"embedded {total - done} photos ({done} already done, 0 failed)"), out
    with Catalog(default_catalog(root)) as cat:
        assert cat.counts()["embedded"] == total
        assert len({r["embed_weights"] for r in cat.files("ok")}) == 1
        assert cat.get_meta("embed_weights") == cat.files("ok")[0]["embed_weights"]


def test_service_killed_mid_embed_stops_cleanly_and_rerun_finishes(tmp_path, onnx_meta):
    from servelab.service.process import ServiceProcess

    total = 20  # the kill comes a few photos in: the rest is what the rerun embeds
    root = tmp_path / "photos"
    cat_path = _photos(root, total, 700)
    svc = ServiceProcess(log_path=tmp_path / "service.log").start()
    try:
        embed = _embed_cli(root, svc.url)
        done = _kill_mid_run(embed, cat_path, lambda: os.kill(svc.pid, signal.SIGKILL), total)
    finally:
        svc.stop()
    # the server is still down: the next run says so in one line and changes nothing
    proc = cli("embed", root, "--mode", "remote", "--url", svc.url, "--no-progress", check=False)
    assert proc.returncode == 1 and proc.stderr.startswith("error: embedding stopped: ") and _embedded(cat_path) == done
    with ServiceProcess(port=svc.port, log_path=tmp_path / "service.log") as again:
        _rerun_finishes(root, again.url, done, total)


def _triton(*args, env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "servelab.cli", "triton", *map(str, args)], env=env,
                          capture_output=True, text=True, timeout=400)


@pytest.mark.triton
def test_tritonserver_killed_mid_embed_and_up_stages_a_missing_repository(tmp_path, onnx_meta):
    from servelab.netutil import free_port

    total = 20
    root = tmp_path / "photos"
    cat_path = _photos(root, total, 800)
    env = {**os.environ, "SERVELAB_TRITON_STATE_DIR": str(tmp_path / "state")}
    http, grpc, metrics = free_port(), free_port(), free_port()
    opts = ["--repository", tmp_path / "models", "--http-port", http, "--grpc-port", grpc, "--metrics-port", metrics]
    up = _triton("up", *opts, env=env)  # no repository yet: up stages it, then starts
    assert up.returncode == 0, up.stderr
    assert "no model repository at" in up.stderr and (tmp_path / "models").is_dir()
    state = json.loads(up.stdout)
    try:
        assert state["models"] and set(state["models"].values()) == {"READY"}
        url = f"http://127.0.0.1:{http}"
        embed = _embed_cli(root, url, "triton-http")
        done = _kill_mid_run(embed, cat_path, lambda: os.killpg(state["pid"], signal.SIGKILL), total)
        again = _triton("up", *opts, env=env)  # staged now: starts straight away
        assert again.returncode == 0 and "no model repository" not in again.stderr, again.stderr
        _rerun_finishes(root, url, done, total, "triton-http")
    finally:
        _triton("down", env=env)


KILLER = textwrap.dedent("""
    import json, os, signal, sys
    import servelab.dedup.trash as trash
    from servelab.dedup import Catalog

    catalog, op, where, k, ids = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), json.loads(sys.argv[5])
    calls = {"move": 0, "append": 0}
    real_move, real_append = trash._move, trash._append

    def move(src, dest):  # SIGKILL this process just before or just after the k-th file move
        calls["move"] += 1
        if calls["move"] == k and where == "before_move":
            os.kill(os.getpid(), signal.SIGKILL)
        real_move(src, dest)
        if calls["move"] == k and where == "after_move":
            os.kill(os.getpid(), signal.SIGKILL)

    def append(cat, record):  # SIGKILL half-way through writing the k-th manifest record
        calls["append"] += 1
        if calls["append"] == k and where == "torn_record":
            with open(trash.manifest_path(cat), "ab") as fh:
                line = json.dumps(record).encode()
                fh.write(line[: len(line) // 2])
                fh.flush()
                os.fsync(fh.fileno())
            os.kill(os.getpid(), signal.SIGKILL)
        real_append(cat, record)

    trash._move, trash._append = move, append
    with Catalog(catalog) as cat:
        trash.trash_files(cat, ids, note="kill test") if op == "trash" else trash.restore(cat)
    print("not killed")
""")


def _md5(p: Path) -> str:
    return hashlib.md5(p.read_bytes()).hexdigest()


def _every_file_in_place_or_in_trash(root: Path, digests: dict, cat: Catalog) -> dict:
    """What is on disk right after the kill, before any recovery: each file in exactly one tracked place."""
    records = {(r["batch"], r["file_id"]): r for r in read_manifest(cat) if r["op"] == "trash"}
    where = {}
    for rel, digest in digests.items():
        here = (root / rel).is_file() and _md5(root / rel) == digest
        trashed = [r for r in records.values() if r["original"] == rel and (cat.trash_dir / r["trash"]).is_file()
                   and _md5(cat.trash_dir / r["trash"]) == digest == r["md5"]]
        assert here + len(trashed) == 1, (rel, here, trashed)
        where[rel] = "original" if here else "trash"
    return where


@pytest.mark.parametrize("op, where", [("trash", "before_move"), ("trash", "after_move"), ("trash", "torn_record"),
                                       ("restore", "before_move"), ("restore", "after_move")])
def test_killed_mid_move_loses_nothing_and_undo_restores_everything(tmp_path, op, where):
    root = tmp_path / "photos"
    (root / "album").mkdir(parents=True)
    names = ["a.jpg", "album/b.jpg", "album/c.jpg", "d.jpg"]
    for k, name in enumerate(names):
        (root / name).write_bytes(encode(synthetic_photo(900 + k, (64, 48))))
    digests = {name: _md5(root / name) for name in names}
    cat_path = default_catalog(root)
    scan(root, cat_path)
    with Catalog(cat_path) as cat:
        ids = [cat.db.execute("SELECT id FROM files WHERE path=?", (n,)).fetchone()[0] for n in names]
    if op == "restore":
        with Catalog(cat_path) as cat:
            trash_files(cat, ids)
    # the second file's move (or, for torn_record, the second file's intent record: append #3) is where it dies
    k = 3 if where == "torn_record" else 2
    child = subprocess.run([sys.executable, "-c", KILLER, str(cat_path), op, where, str(k), json.dumps(ids)],
                           capture_output=True, text=True, timeout=120)
    assert child.returncode == -signal.SIGKILL, child.stdout + child.stderr

    with Catalog(cat_path) as cat:
        placed = _every_file_in_place_or_in_trash(root, digests, cat)
    moved_before_kill = {"trash": {"before_move": 1, "after_move": 2, "torn_record": 1},
                         "restore": {"before_move": 3, "after_move": 2}}[op][where]
    assert sum(v == "trash" for v in placed.values()) == moved_before_kill

    # the next command reconciles: files confirmed where they are, catalog to match, nothing "missing"
    listing = cli("trash", root).stdout
    assert "needs you" not in listing
    # a torn intent record means its move never began: nothing is open, the torn line is simply skipped
    assert listing.startswith("recovered an interrupted delete/undo") == (where != "torn_record"), listing
    with Catalog(cat_path) as cat:
        status = {r["path"]: r["status"] for r in cat.files(None)}
        assert status == {n: "ok" if placed[n] == "original" else "trashed" for n in names}
        assert all(b["in_trash"] == sum(not f["restored"] for f in b["files"]) for b in batches(cat))
    assert scan(root, cat_path).missing == 0

    # undo brings every file back, byte-identical, and the trash ends empty
    with Catalog(cat_path) as cat:
        while any(b["in_trash"] for b in batches(cat)):
            restore(cat)
    assert {n: _md5(root / n) for n in names} == digests
    with Catalog(cat_path) as cat:
        assert {r["path"]: r["status"] for r in cat.files(None)} == dict.fromkeys(names, "ok")
        assert not [p for p in cat.trash_dir.rglob("*") if p.is_file() and p != manifest_path(cat)]
        with pytest.raises(Exception, match="nothing to undo"):
            restore(cat)
        lines = manifest_path(cat).read_text().splitlines()
        assert len(lines) - len(read_manifest(cat)) == (where == "torn_record")  # later records start on a new line
