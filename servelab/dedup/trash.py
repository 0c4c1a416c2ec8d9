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
entry, and undo restores it. A move to another file system goes through `fileio.durable_move` (copy to a
temporary name, sync, verify, link, sync the folder, then unlink the source), so a power loss never leaves
only a truncated copy; a temporary copy left by a kill is removed by `recover`.

One process at a time: every function here that moves files or recovers holds the folder lock (lock.py).
Folders the trash creates get the mode of the folder the photo came from (the photo folder's for the trash
itself), and the manifest the photo folder's mode less execute: a photo kept private stays private.
Lines of the manifest that are not a well-formed record are reported (`manifest_problems`) and skipped.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path

from servelab.dedup.catalog import Catalog, OutsideRoot, file_mode_of, folder_mode_of, safe_path
from servelab.dedup.lock import folder_lock
from servelab.errors import ServelabError
from servelab.fileio import durable_move, file_digest, fsync_dir, make_dirs, partial_copies


class TrashError(ServelabError, ValueError):
    pass


class KeeperGone(TrashError):
    """The photo to keep is no longer in place (another window or process already resolved its group)."""


def manifest_path(cat: Catalog) -> Path:
    return cat.trash_dir / "manifest.jsonl"


def _append(cat: Catalog, record: dict) -> None:
    """Append one record and fsync it; a torn line left by a killed writer is closed off first."""
    path = manifest_path(cat)
    _make_trash_dirs(cat, path.parent)
    new = not path.exists()
    if new:  # created with the photo folder's mode, never the umask's
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        os.chmod(path, file_mode_of(cat.root))
    with open(path, "a+b") as fh:
        if fh.tell() > 0:
            fh.seek(-1, os.SEEK_END)
            if fh.read(1) != b"\n":
                fh.write(b"\n")
        fh.write(json.dumps(record).encode() + b"\n")
        fh.flush()
        os.fsync(fh.fileno())
    if new:
        fsync_dir(path.parent)  # the manifest's name itself survives a power loss


# what each record must carry, by op; anything else on a line makes it malformed
FIELDS = {"trash": {"batch": str, "file_id": int, "original": str, "trash": str, "md5": str, "time": (int, float)}}
COMMON = {"batch": str, "file_id": int, "time": (int, float)}
OPS = ("trash", "moved", "in_place", "restoring", "restore")


def _problem(rec) -> str | None:
    if not isinstance(rec, dict) or rec.get("op") not in OPS:
        return f"not a record of one of {', '.join(OPS)}"
    for key, kind in FIELDS.get(rec["op"], COMMON).items():
        if not isinstance(rec.get(key), kind) or isinstance(rec.get(key), bool):
            return f"{rec['op']!r} record without a valid {key!r}"
    return None


def _read(cat: Catalog) -> tuple[list[dict], list[str]]:
    path = manifest_path(cat)
    if not path.exists():
        return [], []
    records, problems = [], []
    for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            problems.append(f"{path} line {n} skipped: not JSON (a write cut short by a kill, or an edit)")
            continue
        why = _problem(rec)
        if why:
            problems.append(f"{path} line {n} skipped: {why}")
        else:
            records.append(rec)
    return records, problems


def read_manifest(cat: Catalog) -> list[dict]:
    """The manifest's well-formed records, oldest first; a line torn by a kill mid-write (its step never
    began) or otherwise malformed is skipped (`manifest_problems` says which)."""
    return _read(cat)[0]


def manifest_problems(cat: Catalog) -> list[str]:
    """One sentence per manifest line that was skipped, naming the file, the line and why."""
    return _read(cat)[1]


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
    is there) are reported, never resolved by deleting anything; so are skipped manifest lines ("bad_lines").
    """
    with folder_lock(cat):
        return _recover(cat)


def _recover(cat: Catalog) -> dict:
    done: dict = {"moved": 0, "in_place": 0, "restored": 0, "conflicts": [], "bad_lines": manifest_problems(cat)}
    for b in batches(cat):
        for f in b["files"]:
            if f["state"] not in OPEN:
                continue
            try:
                in_trash, at_original = _trash_path(cat, f), safe_path(cat.root, f["original"])
            except (TrashError, OutsideRoot) as exc:
                done["conflicts"].append(f"{f['original']} (batch {b['batch']}): {exc}")
                continue
            for partial in partial_copies(in_trash) + partial_copies(at_original):
                partial.unlink()  # a copy across file systems killed before it was complete: never the file itself
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


def _in_place(cat: Catalog, fid: int, error=TrashError, role: str = ""):
    """The catalog row and path of a file that is still exactly where and what the scan saw, or `error`."""
    row = cat.file(fid)
    if row is None:
        raise error(f"file id {fid} is not in the catalog")
    name = f"{row['path']}{role}"
    if row["status"] == "trashed":
        raise error(f"{name} is already trashed ({row['reason']})")
    if row["status"] != "ok":
        raise error(f"file id {fid} ({name}) is {row['status']}, not a catalogued photo")
    src = safe_path(cat.root, row["path"])
    st = os.lstat(src) if os.path.lexists(src) else None
    if st is None:
        raise error(f"{name} is no longer on disk; rescan")
    if not os.path.isfile(src) or os.path.islink(src):
        raise error(f"{name} is not a regular file")
    if st.st_size != row["size"] or st.st_mtime_ns != row["mtime_ns"]:
        raise error(f"{name} changed since it was scanned; rescan before deleting")
    return row, src


def trash_files(cat: Catalog, file_ids, keeper: int | None = None, note: str = "") -> dict:
    """Move the given catalogued files to the trash as one batch; returns {"batch", "files"}.

    With a `keeper`, the keeper is checked to be in place in the same locked step that moves the others, so
    two windows (or processes) keeping different photos of one group can never trash both: the second gets
    KeeperGone and nothing moves.
    """
    ids = [int(i) for i in file_ids]
    if not ids:
        raise TrashError("nothing to delete: no file ids given")
    if keeper is not None and int(keeper) in ids:
        raise TrashError(f"file {keeper} is the keeper; it cannot also be deleted")
    with folder_lock(cat):
        _recover(cat)
        if keeper is not None:
            _in_place(cat, int(keeper), KeeperGone, " (the photo to keep)")
        checked = [_in_place(cat, fid) for fid in ids]  # check everything before moving anything
        return _trash_checked(cat, checked, keeper, note)


def _trash_checked(cat: Catalog, checked: list, keeper: int | None, note: str) -> dict:
    batch = time.strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:8]
    moved = []
    for row, src in checked:
        dest = cat.trash_dir / batch / row["path"]
        rec = {"op": "trash", "batch": batch, "file_id": row["id"], "original": row["path"],
               "trash": dest.relative_to(cat.trash_dir).as_posix(), "md5": row["md5"], "size": row["size"],
               "keeper": keeper, "note": note, "time": time.time()}
        _append(cat, rec)  # intent first: a kill from here on is closed by `recover`
        _make_trash_dirs(cat, dest.parent, cat.trash_dir / batch)
        _move(src, dest)
        cat.set_status(row["id"], "trashed", f"in trash batch {batch}")
        _append(cat, {"op": "moved", "batch": batch, "file_id": row["id"], "time": time.time()})
        moved.append(rec)
    return {"batch": batch, "files": moved}


def restore(cat: Catalog, batch: str | None = None) -> dict:
    """Move a batch's files (default: the newest batch still in the trash) back to their original paths.

    Returns {"batch", "restored": [original, ...], "failed": [{"original", "reason"}, ...]}: a file that
    cannot go back (its path is taken again, its trash copy is missing or differs) is left where it is and
    named in "failed", and the rest of the batch is restored all the same.
    """
    with folder_lock(cat):
        _recover(cat)
        target = _pick_batch(batches(cat), batch)
        restored, failed = [], []
        for f in target["files"]:
            if f["restored"]:
                continue
            try:
                _restore_one(cat, target["batch"], f)
            except (TrashError, OutsideRoot, OSError) as exc:
                failed.append({"original": f["original"], "reason": str(exc)})
            else:
                restored.append(f["original"])
        return {"batch": target["batch"], "restored": restored, "failed": failed}


def _pick_batch(all_batches: list[dict], batch: str | None) -> dict:
    if batch is None:
        pending = [b for b in all_batches if b["in_trash"]]
        if not pending:
            raise TrashError("the trash is empty: nothing to undo")
        return pending[0]
    found = [b for b in all_batches if b["batch"] == batch]
    if not found:
        raise TrashError(f"no trash batch {batch!r}")
    return found[0]


def _restore_one(cat: Catalog, batch: str, f: dict) -> None:
    src = _trash_path(cat, f)
    try:
        safe_path(cat.root, f["original"])
    except OutsideRoot as exc:
        raise TrashError(str(exc)) from None
    dest = cat.root / f["original"]
    if os.path.lexists(dest):
        raise TrashError("its path is taken again; move that file away and undo again (nothing was overwritten)")
    if not src.is_file():
        raise TrashError(f"{f['trash']} is missing from the trash")
    if f.get("md5") and _md5(src) != f["md5"]:
        raise TrashError(f"{f['trash']} in the trash differs from the photo that was deleted (MD5); left there")
    _append(cat, {"op": "restoring", "batch": batch, "file_id": f["file_id"], "time": time.time()})
    trash_root = cat.trash_dir / batch
    make_dirs(dest.parent, _mirror_mode(cat, cat.root, trash_root))
    _move(src, dest)
    cat.set_status(f["file_id"], "ok", None)
    _append(cat, {"op": "restore", "batch": batch, "file_id": f["file_id"], "time": time.time()})
    _prune_empty(src.parent, cat.trash_dir)


def _mirror_mode(cat: Catalog, new_base: Path, like_base: Path):
    """Mode for a folder created under `new_base`: that of the same folder under `like_base` if it exists
    (a trash folder takes its source folder's mode, a restored folder its trash folder's), else the photo
    folder's own."""
    def mode_for(p: Path) -> int:
        like = like_base / p.relative_to(new_base) if p.is_relative_to(new_base) else None
        if like is not None and like.is_dir():
            return os.stat(like).st_mode & 0o777
        return folder_mode_of(cat.root)
    return mode_for


def _make_trash_dirs(cat: Catalog, folder: Path, batch_dir: Path | None = None) -> None:
    make_dirs(folder, _mirror_mode(cat, batch_dir, cat.root) if batch_dir else lambda p: folder_mode_of(cat.root))


def _move(src: Path, dest: Path) -> None:
    """Move one file durably (see fileio.durable_move); its folder already exists with the right mode."""
    try:
        durable_move(src, dest)
    except FileExistsError:
        raise TrashError(f"{dest} already exists; refusing to overwrite") from None


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
