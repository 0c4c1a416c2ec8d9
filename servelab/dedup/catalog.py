"""The SQLite catalog: one row per file seen under the scanned root, plus feedback and settings.

Paths are stored relative to the root (POSIX separators); every file access goes back through
`safe_path`, which resolves the path and refuses anything that lands outside the root. The catalog is the
only place ids come from, so URLs and commands carry ids, never paths.
"""

from __future__ import annotations

import os
import sqlite3
import stat
import time
from pathlib import Path

import numpy as np

from servelab.errors import InvalidValue, ServelabError
from servelab.model.contract import EMBED_DIM

STATE_DIR = ".servelab"  # inside the root: default catalog + trash; never scanned

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS files (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    path TEXT NOT NULL UNIQUE,          -- relative to the root, POSIX separators
    status TEXT NOT NULL,               -- ok | error | skipped | missing | trashed
    reason TEXT,                        -- why error / skipped
    kind TEXT,                          -- machine-readable reason kind (corrupt, permission_denied, symlink_loop, ...)
    size INTEGER, mtime_ns INTEGER,
    md5 TEXT, phash TEXT, dhash TEXT,
    format TEXT, width INTEGER, height INTEGER,
    orientation INTEGER, taken TEXT,    -- EXIF orientation tag and DateTimeOriginal (or DateTime)
    scanned_at REAL,
    embedding BLOB, embed_weights TEXT,
    embed_error TEXT                    -- why this file could not be embedded (it still takes part in MD5 groups)
);
CREATE INDEX IF NOT EXISTS files_md5 ON files(md5);
CREATE INDEX IF NOT EXISTS files_status ON files(status);
CREATE TABLE IF NOT EXISTS feedback (
    a INTEGER NOT NULL, b INTEGER NOT NULL,   -- file ids, a < b
    verdict TEXT NOT NULL,                    -- not_duplicate
    created REAL NOT NULL,
    PRIMARY KEY (a, b)
);
"""


class Catalog:
    """A thin wrapper over the sqlite connection with the few queries the finder needs."""

    def __init__(self, path: str | Path, root: str | Path | None = None, lock_wait_s: float | None = None):
        self.path = Path(path)
        self.lock_wait_s = lock_wait_s  # how long to wait for another process moving files here (None: default)
        if root is not None and not self.path.exists():
            _create_private_like(self.path, Path(root))
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(str(self.path), timeout=30, check_same_thread=False)
        self.db.row_factory = sqlite3.Row
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.executescript(SCHEMA)
        cols = {r[1] for r in self.db.execute("PRAGMA table_info(files)")}
        if "embed_error" not in cols:  # catalogs written before the column existed
            self.db.execute("ALTER TABLE files ADD COLUMN embed_error TEXT")
        stored = self.get_meta("root")
        if root is not None:
            root = Path(root).resolve()
            if stored and Path(stored) != root:
                raise InvalidValue(f"catalog {self.path} belongs to root {stored}, not {root}; use another --catalog")
            if not stored:
                self.set_meta("root", str(root))
        elif not stored:
            raise InvalidValue(f"catalog {self.path} has no root yet: run `servelab dedup scan ROOT` first")
        self.root = Path(self.get_meta("root"))

    # --- meta ---------------------------------------------------------------------------------------
    def get_meta(self, key: str, default: str | None = None) -> str | None:
        row = self.db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return row[0] if row else default

    def set_meta(self, key: str, value: str) -> None:
        with self.db:
            self.db.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", (key, value))

    @property
    def trash_dir(self) -> Path:
        return Path(self.get_meta("trash_dir") or (self.root / STATE_DIR / "trash"))

    # --- files --------------------------------------------------------------------------------------
    def file(self, file_id: int) -> sqlite3.Row | None:
        return self.db.execute("SELECT * FROM files WHERE id=?", (int(file_id),)).fetchone()

    def files(self, status: str | None = "ok") -> list[sqlite3.Row]:
        if status is None:
            return self.db.execute("SELECT * FROM files ORDER BY id").fetchall()
        return self.db.execute("SELECT * FROM files WHERE status=? ORDER BY id", (status,)).fetchall()

    def counts(self) -> dict:
        rows = self.db.execute("SELECT status, COUNT(*) FROM files GROUP BY status").fetchall()
        out = {r[0]: r[1] for r in rows}
        out["embedded"] = self.db.execute(
            "SELECT COUNT(*) FROM files WHERE status='ok' AND embedding IS NOT NULL").fetchone()[0]
        out["embed_failed"] = self.db.execute(
            "SELECT COUNT(*) FROM files WHERE status='ok' AND embed_error IS NOT NULL").fetchone()[0]
        return out

    def problems(self) -> list[dict]:
        rows = self.db.execute(
            "SELECT path, status, kind, reason FROM files WHERE status IN ('error','skipped') ORDER BY path").fetchall()
        failed = self.db.execute(
            "SELECT path, 'ok' AS status, 'embed_failed' AS kind, embed_error AS reason FROM files "
            "WHERE status='ok' AND embed_error IS NOT NULL ORDER BY path").fetchall()
        return [dict(r) for r in rows] + [dict(r) for r in failed]

    def set_status(self, file_id: int, status: str, reason: str | None = None) -> None:
        with self.db:
            self.db.execute("UPDATE files SET status=?, reason=? WHERE id=?", (status, reason, int(file_id)))

    # --- embeddings ---------------------------------------------------------------------------------
    def embeddings(self, weights: str | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(ids int64 [N], float32 [N, 512]) for ok files with an embedding (of `weights` when given)."""
        q = "SELECT id, embedding FROM files WHERE status='ok' AND embedding IS NOT NULL"
        args: tuple = ()
        if weights:
            q += " AND embed_weights=?"
            args = (weights,)
        rows = self.db.execute(q + " ORDER BY id", args).fetchall()
        ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
        emb = np.empty((len(rows), EMBED_DIM), dtype=np.float32)
        for i, r in enumerate(rows):
            emb[i] = np.frombuffer(r[1], dtype=np.float32)
        return ids, emb

    # --- feedback -----------------------------------------------------------------------------------
    def add_not_duplicate(self, ids) -> int:
        ids = sorted({int(i) for i in ids})
        pairs = [(a, b) for i, a in enumerate(ids) for b in ids[i + 1:]]
        now = time.time()
        with self.db:
            self.db.executemany(
                "INSERT OR REPLACE INTO feedback(a, b, verdict, created) VALUES (?, ?, 'not_duplicate', ?)",
                [(a, b, now) for a, b in pairs])
        return len(pairs)

    def not_duplicate_pairs(self) -> set[tuple[int, int]]:
        return {(r[0], r[1]) for r in self.db.execute("SELECT a, b FROM feedback WHERE verdict='not_duplicate'")}

    # --- paths --------------------------------------------------------------------------------------
    def safe_path(self, rel: str) -> Path:
        """Absolute path of a catalogued file; refuses anything outside the root (traversal, symlinks)."""
        return safe_path(self.root, rel)

    def close(self) -> None:
        self.db.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class OutsideRoot(ServelabError, ValueError):
    """A path that would leave the scanned root: refused."""


def safe_path(root: Path, rel: str) -> Path:
    root = Path(root).resolve()
    if not rel or Path(rel).is_absolute() or "\x00" in rel:
        raise OutsideRoot(f"refused path {rel!r}: not a relative path inside {root}")
    candidate = root / rel
    resolved = candidate.resolve()
    if not resolved.is_relative_to(root) or resolved == root:
        raise OutsideRoot(f"refused path {rel!r}: it resolves outside the scanned root {root}")
    if candidate.is_symlink():
        raise OutsideRoot(f"refused path {rel!r}: it is a symbolic link")
    if resolved.is_relative_to(root / STATE_DIR):
        raise OutsideRoot(f"refused path {rel!r}: it is inside the finder's own state folder")
    return resolved


def folder_mode_of(root: Path) -> int:
    """The mode for a folder the finder creates (state, trash, batch): the photo folder's own, so a photo that a
    0700 folder keeps private stays private in the trash and in the catalog."""
    return stat.S_IMODE(os.stat(root).st_mode) & 0o777


def file_mode_of(root: Path) -> int:
    """The mode for a file the finder creates (catalog, manifest, lock): the photo folder's, less execute."""
    return folder_mode_of(root) & 0o666


def _create_private_like(path: Path, root: Path) -> None:
    """Create a new catalog file (and its folder) with the photo folder's mode before SQLite opens it; SQLite
    gives its journal files the same mode as the database."""
    from servelab.fileio import fsync_dir, make_dirs

    if not root.is_dir():
        return  # the scan says what is wrong with the root
    make_dirs(path.parent, lambda p: folder_mode_of(root))
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    try:
        os.fchmod(fd, file_mode_of(root))
    finally:
        os.close(fd)
    fsync_dir(path.parent)


def default_catalog(root: str | Path) -> Path:
    return Path(root).resolve() / STATE_DIR / "catalog.sqlite"
