"""Delete = move into a trash folder, with a JSON-lines manifest; undo moves the files back.

Nothing is ever unlinked. Each deletion is a batch with an id; the manifest line is written (and flushed
to disk) before the file moves, so even a crash mid-batch leaves a record of where every file went. A file
is only moved if it is a catalogued, regular file inside the scanned root whose size and mtime still match
the catalog; undo refuses to overwrite anything that now sits at the original path, and checks the MD5 of
what it restored.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import time
import uuid
from pathlib import Path

from servelab.dedup.catalog import Catalog, OutsideRoot, safe_path
from servelab.fileio import file_digest


class TrashError(ValueError):
    pass


def manifest_path(cat: Catalog) -> Path:
    return cat.trash_dir / "manifest.jsonl"


def _append(cat: Catalog, record: dict) -> None:
    path = manifest_path(cat)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(record) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def read_manifest(cat: Catalog) -> list[dict]:
    path = manifest_path(cat)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def batches(cat: Catalog) -> list[dict]:
    """Deletion batches, newest first, each with its files and whether they are still in the trash."""
    out: dict[str, dict] = {}
    restored = set()
    for rec in read_manifest(cat):
        if rec["op"] == "trash":
            b = out.setdefault(rec["batch"], {"batch": rec["batch"], "time": rec["time"], "files": []})
            b["files"].append(rec)
        elif rec["op"] == "restore":
            restored.add((rec["batch"], rec["file_id"]))
    for b in out.values():
        for f in b["files"]:
            f["restored"] = (b["batch"], f["file_id"]) in restored
        b["in_trash"] = sum(not f["restored"] for f in b["files"])
    return sorted(out.values(), key=lambda b: b["time"], reverse=True)


def trash_files(cat: Catalog, file_ids, keeper: int | None = None, note: str = "") -> dict:
    """Move the given catalogued files to the trash as one batch; returns {"batch", "files"}."""
    ids = [int(i) for i in file_ids]
    if not ids:
        raise TrashError("nothing to delete: no file ids given")
    if keeper is not None and int(keeper) in ids:
        raise TrashError(f"file {keeper} is the keeper; it cannot also be deleted")
    checked = []
    for fid in ids:  # check everything before moving anything
        row = cat.file(fid)
        if row is None:
            raise TrashError(f"file id {fid} is not in the catalog")
        if row["status"] != "ok":
            raise TrashError(f"file id {fid} ({row['path']}) is {row['status']}, not a catalogued photo")
        src = safe_path(cat.root, row["path"])
        st = os.lstat(src) if os.path.lexists(src) else None
        if st is None:
            raise TrashError(f"{row['path']} is no longer on disk; rescan")
        if not os.path.isfile(src) or os.path.islink(src):
            raise TrashError(f"{row['path']} is not a regular file")
        if st.st_size != row["size"] or st.st_mtime_ns != row["mtime_ns"]:
            raise TrashError(f"{row['path']} changed since it was scanned; rescan before deleting")
        checked.append((row, src))
    batch = time.strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:8]
    moved = []
    for row, src in checked:
        dest = cat.trash_dir / batch / row["path"]
        rec = {"op": "trash", "batch": batch, "file_id": row["id"], "original": row["path"],
               "trash": dest.relative_to(cat.trash_dir).as_posix(), "md5": row["md5"], "size": row["size"],
               "keeper": keeper, "note": note, "time": time.time()}
        _append(cat, rec)
        _move(src, dest)
        cat.set_status(row["id"], "trashed", f"in trash batch {batch}")
        moved.append(rec)
    return {"batch": batch, "files": moved}


def restore(cat: Catalog, batch: str | None = None) -> dict:
    """Move a batch's files (default: the newest batch still in the trash) back to their original paths."""
    all_batches = batches(cat)
    if batch is None:
        pending = [b for b in all_batches if b["in_trash"]]
        if not pending:
            raise TrashError("the trash is empty: nothing to undo")
        target = pending[0]
    else:
        found = [b for b in all_batches if b["batch"] == batch]
        if not found:
            raise TrashError(f"no trash batch {batch!r}")
        target = found[0]
    restored = []
    for f in target["files"]:
        if f["restored"]:
            continue
        src = (cat.trash_dir / f["trash"]).resolve()
        if not src.is_relative_to(cat.trash_dir.resolve()):
            raise TrashError(f"manifest entry points outside the trash: {f['trash']}")
        dest = cat.root / f["original"]
        try:
            safe_path(cat.root, f["original"])
        except OutsideRoot as exc:
            raise TrashError(str(exc)) from None
        if os.path.lexists(dest):
            raise TrashError(f"{f['original']} exists again; move it away before undoing (nothing was overwritten)")
        if not src.is_file():
            raise TrashError(f"{f['trash']} is missing from the trash")
        dest.parent.mkdir(parents=True, exist_ok=True)
        _move(src, dest)
        if f.get("md5") and file_digest(dest, "md5") != f["md5"]:
            raise TrashError(f"{f['original']} restored but its MD5 differs from the catalog's")
        _append(cat, {"op": "restore", "batch": target["batch"], "file_id": f["file_id"], "time": time.time()})
        cat.set_status(f["file_id"], "ok", None)
        restored.append(f["original"])
        _prune_empty(src.parent, cat.trash_dir)
    return {"batch": target["batch"], "restored": restored}


def _move(src: Path, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    if os.path.lexists(dest):
        raise TrashError(f"{dest} already exists; refusing to overwrite")
    try:
        os.rename(src, dest)  # same file system: atomic, byte-identical, keeps mtime
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
        shutil.copy2(src, dest)  # another file system: copy, verify, then remove the source
        if file_digest(src, "md5") != file_digest(dest, "md5"):
            dest.unlink()
            raise TrashError(f"copy of {src} to {dest} did not verify; nothing was removed")
        os.unlink(src)


def _prune_empty(folder: Path, stop: Path) -> None:
    folder, stop = folder.resolve(), stop.resolve()
    while folder != stop and folder.is_relative_to(stop):
        try:
            folder.rmdir()  # only succeeds when empty
        except OSError:
            return
        folder = folder.parent
