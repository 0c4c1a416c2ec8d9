"""Scan a folder into the catalog: hashes, dimensions and EXIF for every JPEG / PNG / WebP.

Incremental: a file whose size and mtime match its catalog row is not read again. Every file that cannot be
catalogued gets a row with status `error` or `skipped` and a reason, and the scan goes on. Symbolic links
are never followed (so nothing outside the root is read and loops cannot trap the walk); they are recorded,
with `symlink_loop` for links that point back at themselves or at a folder that contains them.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path

import imagehash
from PIL import Image

from servelab.dedup.catalog import STATE_DIR, Catalog
from servelab.dedup.lock import folder_lock
from servelab.dedup.trash import recover
from servelab.model.preprocess import ImageDecodeError, decode_image

EXTENSIONS = {".jpg": "JPEG", ".jpeg": "JPEG", ".jpe": "JPEG", ".png": "PNG", ".webp": "WEBP"}
MAX_BYTES = 256 * 1024 * 1024
MAX_PIXELS = 120_000_000
EXIF_ORIENTATION, EXIF_DATETIME, EXIF_IFD, EXIF_DATETIME_ORIGINAL = 0x0112, 0x0132, 0x8769, 0x9003


@dataclass
class ScanReport:
    root: str
    seen: int = 0
    new: int = 0
    updated: int = 0
    unchanged: int = 0
    missing: int = 0
    problems: list = field(default_factory=list)  # {"path", "status", "kind", "reason"}
    seconds: float = 0.0

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def scan(root: str | Path, catalog: str | Path | Catalog, progress: bool = False,
         lock_wait_s: float | None = None) -> ScanReport:
    """Walk `root` recursively and bring the catalog up to date; returns what happened. Holds the folder lock
    throughout (waiting up to `lock_wait_s` for a delete or undo in another process)."""
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: not a folder")
    cat = catalog if isinstance(catalog, Catalog) else Catalog(catalog, root=root, lock_wait_s=lock_wait_s)
    try:
        with folder_lock(cat):  # no delete or undo moves files while the walk decides what is missing
            return _scan_locked(cat, progress)
    finally:
        if not isinstance(catalog, Catalog):
            cat.close()


def _scan_locked(cat: Catalog, progress: bool) -> ScanReport:
    root = cat.root
    recover(cat)  # a delete or undo killed half-way: put its files on record first, so none looks "missing"
    t0 = time.perf_counter()
    report = ScanReport(root=str(root))
    known = {r["path"]: r for r in cat.db.execute("SELECT id, path, status, kind, reason, size, mtime_ns FROM files")}
    seen: set[str] = set()
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(unit="file", desc="scanning")
    for rel, entry in _walk(root, cat.path, cat.trash_dir):
        if report.seen % 200 == 0:
            cat.db.commit()
        seen.add(rel)
        report.seen += 1
        if bar is not None:
            bar.update(1)
        old = known.get(rel)
        if isinstance(entry, Problem):
            _upsert(cat, rel, {"status": entry.status, "kind": entry.kind, "reason": entry.reason})
            report.problems.append({"path": rel, "status": entry.status, "kind": entry.kind, "reason": entry.reason})
            continue
        st: os.stat_result = entry
        if (old is not None and old["status"] in ("ok", "error", "skipped") and old["size"] == st.st_size
                and old["mtime_ns"] == st.st_mtime_ns):
            report.unchanged += 1
            if old["status"] != "ok":
                report.problems.append({"path": rel, "status": old["status"], "kind": old["kind"], "reason": old["reason"]})
            continue
        row = _examine(root / rel, st)
        if row["status"] != "ok":
            report.problems.append({"path": rel, "status": row["status"], "kind": row["kind"], "reason": row["reason"]})
        _upsert(cat, rel, {**row, "embedding": None, "embed_weights": None, "embed_error": None})
        if old is None:
            report.new += 1
        else:
            report.updated += 1
    cat.db.commit()
    gone = [r["id"] for p, r in known.items() if p not in seen and r["status"] not in ("trashed", "missing")]
    with cat.db:
        cat.db.executemany("UPDATE files SET status='missing', reason='no longer on disk' WHERE id=?",
                           [(i,) for i in gone])
    report.missing = len(gone)
    if bar is not None:
        bar.close()
    report.seconds = round(time.perf_counter() - t0, 3)
    cat.set_meta("last_scan", time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    return report


@dataclass
class Problem:
    status: str  # error | skipped
    kind: str
    reason: str


def _walk(root: Path, catalog_path: Path, trash_dir: Path):
    """Yield (relative posix path, os.stat_result | Problem) for every entry below root, without following links."""
    state = root / STATE_DIR
    own = {Path(catalog_path).resolve(), Path(str(catalog_path) + "-wal").resolve(),
           Path(str(catalog_path) + "-shm").resolve()}
    stack = [root]
    while stack:
        folder = stack.pop()
        try:
            with os.scandir(folder) as it:
                entries = sorted(it, key=lambda e: e.name)
        except PermissionError:
            yield _rel(root, folder) + "/", Problem("error", "permission_denied", "permission denied: cannot list this folder")
            continue
        except OSError as exc:
            yield _rel(root, folder) + "/", Problem("error", "unreadable", f"cannot list this folder: {exc.strerror or exc}")
            continue
        for e in entries:
            path = Path(e.path)
            if path == state or path == trash_dir or path in own:
                continue
            rel = _rel(root, path)
            try:
                if e.is_symlink():
                    yield rel, _symlink_problem(root, path)
                    continue
                st = e.stat(follow_symlinks=False)
            except PermissionError:
                yield rel, Problem("error", "permission_denied", "permission denied")
                continue
            except OSError as exc:
                yield rel, Problem("error", "unreadable", f"cannot stat: {exc.strerror or exc}")
                continue
            if stat.S_ISDIR(st.st_mode):
                stack.append(path)
            elif not stat.S_ISREG(st.st_mode):
                yield rel, Problem("skipped", "not_a_regular_file", "not a regular file (device, socket or pipe)")
            elif path.suffix.lower() not in EXTENSIONS:
                yield rel, Problem("skipped", "unsupported_type",
                                   f"unsupported file type {path.suffix or '(no extension)'}: only JPEG, PNG and WebP are scanned")
            else:
                yield rel, st


def _symlink_problem(root: Path, link: Path) -> Problem:
    try:
        target = link.resolve(strict=True)
    except RuntimeError:  # Python < 3.13 raises RuntimeError on loops
        return Problem("skipped", "symlink_loop", "symbolic link loop: the link resolves back to itself")
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return Problem("skipped", "symlink_loop", "symbolic link loop: the link resolves back to itself")
        return Problem("skipped", "broken_symlink", f"broken symbolic link to {os.readlink(link)}")
    if target.is_dir() and link.parent.resolve().is_relative_to(target):
        return Problem("skipped", "symlink_loop",
                       f"symbolic link loop: points to {_rel(root, target) if target.is_relative_to(root) else target}, "
                       "a folder that contains the link")
    if not target.is_relative_to(root):
        return Problem("skipped", "symlink_outside_root", "symbolic link to a place outside the scanned root: not followed")
    return Problem("skipped", "symlink", f"symbolic link to {_rel(root, target)}: not followed (the target is scanned itself)")


def _rel(root: Path, path: Path) -> str:
    rel = path.relative_to(root).as_posix()
    return "." if rel in ("", ".") else rel


def _examine(path: Path, st: os.stat_result) -> dict:
    base = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "scanned_at": time.time(), "md5": None, "phash": None,
            "dhash": None, "format": None, "width": None, "height": None, "orientation": None, "taken": None}
    try:
        data = path.read_bytes() if st.st_size <= MAX_BYTES else None
    except PermissionError:
        return {**base, "status": "error", "kind": "permission_denied", "reason": "permission denied: cannot read the file"}
    except OSError as exc:
        return {**base, "status": "error", "kind": "unreadable", "reason": f"cannot read the file: {exc.strerror or exc}"}
    if data is None:
        return {**base, "status": "skipped", "kind": "too_large", "reason": f"file is {st.st_size} bytes, over {MAX_BYTES}"}
    base["md5"] = hashlib.md5(data).hexdigest()
    try:
        img = decode_image(data, max_bytes=MAX_BYTES, max_pixels=MAX_PIXELS)
    except ImageDecodeError as exc:
        status = "skipped" if exc.kind == "too_many_pixels" else "error"
        return {**base, "status": status, "kind": exc.kind, "reason": str(exc)}
    fmt, orientation, taken = _header(data)
    if fmt not in ("JPEG", "PNG", "WEBP"):
        return {**base, "status": "skipped", "kind": "unsupported_type",
                "reason": f"content is {fmt or 'unknown'}, not JPEG/PNG/WebP (despite the {path.suffix} name)"}
    small = img.copy()
    small.thumbnail((512, 512), Image.BILINEAR)  # hashes work on 32x32 / 9x8 anyway; this keeps big photos fast
    return {**base, "status": "ok", "kind": None, "reason": None, "format": fmt, "width": img.width,
            "height": img.height, "orientation": orientation, "taken": taken,
            "phash": str(imagehash.phash(small)), "dhash": str(imagehash.dhash(small))}


def _header(data: bytes) -> tuple[str | None, int | None, str | None]:
    import io

    with Image.open(io.BytesIO(data)) as im:
        fmt = im.format
        try:
            exif = im.getexif()
        except Exception:
            return fmt, None, None
    orientation = exif.get(EXIF_ORIENTATION)
    taken = None
    try:
        taken = exif.get_ifd(EXIF_IFD).get(EXIF_DATETIME_ORIGINAL)
    except Exception:
        pass
    taken = taken or exif.get(EXIF_DATETIME)
    if isinstance(taken, bytes):
        taken = taken.decode("ascii", "replace")
    return fmt, int(orientation) if orientation else None, (str(taken).strip("\x00 ") or None) if taken else None


COLUMNS = ("status", "kind", "reason", "size", "mtime_ns", "md5", "phash", "dhash", "format", "width", "height",
           "orientation", "taken", "scanned_at", "embedding", "embed_weights", "embed_error")


def _upsert(cat: Catalog, rel: str, values: dict) -> None:
    cols = [c for c in COLUMNS if c in values]
    cur = cat.db.execute(f"UPDATE files SET {', '.join(c + '=?' for c in cols)} WHERE path=?",
                         [values[c] for c in cols] + [rel])
    if cur.rowcount == 0:
        cat.db.execute(f"INSERT INTO files(path, {', '.join(cols)}) VALUES (?{', ?' * len(cols)})",
                       [rel] + [values[c] for c in cols])
