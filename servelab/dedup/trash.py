"""Delete = move into a trash folder, with a JSON-lines manifest; undo moves the files back.

Nothing is ever unlinked (except a redundant copy whose original is verified intact). A file is only moved if
it is a catalogued, regular file inside the scanned root whose size and mtime still match the catalog; undo
refuses to overwrite anything that now sits at the original path, and checks the MD5 of what it restored.

Every step survives being killed. Each move is bracketed by manifest records, each written and fsynced
before the next step: `trash` (intent) -> move -> catalog `trashed` -> `moved`; and for undo `restoring` ->
move back -> catalog `ok` -> `restore`. A file whose last record is an intent (`trash`, `restoring`) was
interrupted; `recover` (run by every trash command, the scan and the review UI before anything else) looks
at the disk and closes it: found in the trash -> `moved`, found at its original path -> `in_place` /
`restore`, with the catalog set to match. A torn last manifest line (killed mid-write) is skipped: its step
never started. So at any moment every file is either at its original path or in the trash with a manifest
entry, and undo restores it.
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
    """Append one record and fsync it; a torn line left by a killed writer is closed off first."""
    path = manifest_path(cat)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+b") as fh:
        if fh.tell() > 0:
            fh.seek(-1, os.SEEK_END)
            if fh.read(1) != b"\n":
                fh.write(b"\n")
        fh.write(json.dumps(record).encode() + b"\n")
        fh.flush()
        os.fsync(fh.fileno())


def read_manifest(cat: Catalog) -> list[dict]:
    """The manifest's records, oldest first; a line torn by a kill mid-write is skipped (its step never began)."""
    path = manifest_path(cat)
    if not path.exists():
        return []
    records = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and "op" in rec:
            records.append(rec)
    return records


AT_ORIGINAL = ("restore", "in_place")  # last ops that leave a file at its original path
OPEN = ("trash", "restoring")  # intents: the step after them may or may not have happened


def batches(cat: Catalog) -> list[dict]:
    """Deletion batches, newest first, each with its files and whether they are still in the trash."""
    out: dict[str, dict] = {}
    last: dict[tuple[str, int], str] = {}
    for rec in read_manifest(cat):
        if rec["op"] == "trash" and (rec["batch"], rec["file_id"]) not in last:
            b = out.setdefault(rec["batch"], {"batch": rec["batch"], "time": rec["time"], "files": []})
            b["files"].append(rec)
        last[(rec["batch"], rec["file_id"])] = rec["op"]
    for b in out.values():
        for f in b["files"]:
            f["state"] = last[(b["batch"], f["file_id"])]
            f["restored"] = f["state"] in AT_ORIGINAL
        b["in_trash"] = sum(not f["restored"] for f in b["files"])
    return sorted(out.values(), key=lambda b: b["time"], reverse=True)


def recover(cat: Catalog) -> dict:
    """Close every step a killed process left open, by what is on disk; returns what it did and what it could not.

    Idempotent and cheap when nothing is open (one manifest read). Conflicts (both copies differ, or neither
    is there) are reported, never resolved by deleting anything.
    """
    done: dict = {"moved": 0, "in_place": 0, "restored": 0, "conflicts": []}
    for b in batches(cat):
        for f in b["files"]:
            if f["state"] not in OPEN:
                continue
            try:
                in_trash, at_original = _trash_path(cat, f), safe_path(cat.root, f["original"])
            except (TrashError, OutsideRoot) as exc:
                done["conflicts"].append(f"{f['original']} (batch {b['batch']}): {exc}")
                continue
            has_trash, has_original = in_trash.is_file(), os.path.lexists(at_original)
            original_intact = os.path.isfile(at_original) and _md5(at_original) == f["md5"]
            if has_trash and original_intact:
                os.unlink(in_trash)  # an interrupted copy next to a verified original: redundant
                _prune_empty(in_trash.parent, cat.trash_dir)
                has_trash = False
            if has_trash and not has_original:
                cat.set_status(f["file_id"], "trashed", f"in trash batch {b['batch']}")
                _append(cat, {"op": "moved", "batch": b["batch"], "file_id": f["file_id"], "time": time.time(),
                              "recovered": True})
                done["moved"] += 1
            elif original_intact and not has_trash:
                row = cat.file(f["file_id"])
                if row is not None and row["status"] in ("trashed", "missing"):
                    cat.set_status(f["file_id"], "ok", None)
                op = "in_place" if f["state"] == "trash" else "restore"
                _append(cat, {"op": op, "batch": b["batch"], "file_id": f["file_id"], "time": time.time(),
                              "recovered": True})
                done["restored" if op == "restore" else "in_place"] += 1
            else:
                where = "in both places with different content" if has_trash else (
                    "at its original path with different content" if has_original else "in neither place")
                done["conflicts"].append(f"{f['original']} (batch {b['batch']}) is {where}: left as it is")
    return done


def _trash_path(cat: Catalog, f: dict) -> Path:
    path = (cat.trash_dir / f["trash"]).resolve()
    if not path.is_relative_to(cat.trash_dir.resolve()):
        raise TrashError(f"manifest entry points outside the trash: {f['trash']}")
    return path


def trash_files(cat: Catalog, file_ids, keeper: int | None = None, note: str = "") -> dict:
    """Move the given catalogued files to the trash as one batch; returns {"batch", "files"}."""
    ids = [int(i) for i in file_ids]
    if not ids:
        raise TrashError("nothing to delete: no file ids given")
    recover(cat)
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
        _append(cat, rec)  # intent first: a kill from here on is closed by `recover`
        _move(src, dest)
        cat.set_status(row["id"], "trashed", f"in trash batch {batch}")
        _append(cat, {"op": "moved", "batch": batch, "file_id": row["id"], "time": time.time()})
        moved.append(rec)
    return {"batch": batch, "files": moved}


def restore(cat: Catalog, batch: str | None = None) -> dict:
    """Move a batch's files (default: the newest batch still in the trash) back to their original paths."""
    recover(cat)
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
        src = _trash_path(cat, f)
        dest = cat.root / f["original"]
        try:
            safe_path(cat.root, f["original"])
        except OutsideRoot as exc:
            raise TrashError(str(exc)) from None
        if os.path.lexists(dest):
            raise TrashError(f"{f['original']} exists again; move it away before undoing (nothing was overwritten)")
        if not src.is_file():
            raise TrashError(f"{f['trash']} is missing from the trash")
        _append(cat, {"op": "restoring", "batch": target["batch"], "file_id": f["file_id"], "time": time.time()})
        _move(src, dest)
        if f.get("md5") and _md5(dest) != f["md5"]:
            raise TrashError(f"{f['original']} restored but its MD5 differs from the catalog's")
        cat.set_status(f["file_id"], "ok", None)
        _append(cat, {"op": "restore", "batch": target["batch"], "file_id": f["file_id"], "time": time.time()})
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
        if _md5(src) != _md5(dest):
            dest.unlink()
            raise TrashError(f"copy of {src} to {dest} did not verify; nothing was removed") from None
        os.unlink(src)
    for folder in {dest.parent, src.parent}:  # make the move itself durable, not only the manifest
        _fsync_dir(folder)


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _md5(path: Path) -> str:
    return file_digest(path, "md5")


def _prune_empty(folder: Path, stop: Path) -> None:
    folder, stop = folder.resolve(), stop.resolve()
    while folder != stop and folder.is_relative_to(stop):
        try:
            folder.rmdir()  # only succeeds when empty
        except OSError:
            return
        folder = folder.parent
