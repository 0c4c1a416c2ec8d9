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
from servelab.dedup.trash import batches, manifest_path, read_manifest, restore

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

    total = 60
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
