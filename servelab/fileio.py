"""Writing files so that a reader never sees half of one, and naming a file's content by its digest.

A crash or a full disk during a write leaves the previous file (or none), never a truncated one: content goes
to a uniquely named temporary file in the same folder (two writers never share it), is flushed to disk, and
is renamed over the destination in one step. The file gets the mode a plain `open()` would give it (0666 less
the umask), not mkstemp's private 0600: an export or a staged config is read by containers running as other users.

`durable_move` moves a file so that a crash or a power loss never leaves only a truncated copy (across file
systems: copy to a temporary name, sync, verify, link into place, sync the folder, then unlink the source),
and `make_dirs` creates folders with a chosen mode, each synced into its parent.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import hashlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from servelab.errors import ServelabError


def _umask() -> int:
    """The process umask, read without changing it where Linux allows (os.umask sets it for every thread)."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _fsync(path: Path | str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_path(path: Path | str, suffix: str = ".tmp") -> Iterator[Path]:
    """A fresh temporary path next to `path` for a writer that wants a file name (ONNX export, savefig);
    renamed over `path` when the block succeeds, deleted when it raises. `suffix` keeps the extension a
    writer may look at (e.g. ".png")."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=suffix)
    os.close(fd)
    try:
        os.chmod(tmp, 0o666 & ~_umask())
        yield Path(tmp)
        _fsync(tmp)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):  # make the rename itself durable
        _fsync(path.parent)


def atomic_write(path: Path | str, data: str | bytes) -> Path:
    """Replace `path` with `data` (text is written as UTF-8) in one step; returns `path`."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data.encode() if isinstance(data, str) else data)
    return Path(path)


def file_digest(path: Path | str, algorithm: str = "sha256") -> str:
    """Hex digest of a file's bytes, read in chunks (large ONNX files, photos)."""
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, algorithm).hexdigest()


def fsync_dir(folder: Path | str) -> None:
    """Make the entries of `folder` (a rename, a new file, a new subfolder) durable; a no-op where the file
    system cannot sync a folder."""
    with contextlib.suppress(OSError):
        _fsync(folder)


def make_dirs(folder: Path | str, mode_for) -> list[Path]:
    """Create `folder` and its missing parents, each with the mode `mode_for(path)` returns (exactly, umask
    aside), and each synced into its parent so a power loss cannot drop it; returns the folders created."""
    folder = Path(folder)
    missing = []
    for p in (folder, *folder.parents):
        if p.is_dir():
            break
        missing.append(p)
    created = []
    for p in reversed(missing):
        try:
            os.mkdir(p, 0o700)  # private until its mode is set: never briefly wider than asked
        except FileExistsError:
            if not p.is_dir():
                raise
            continue
        os.chmod(p, mode_for(p))
        fsync_dir(p.parent)
        created.append(p)
    return created


class MoveVerifyError(ServelabError, OSError):
    """A copy across file systems that did not read back as the source: the source was left in place."""


def durable_move(src: Path | str, dest: Path | str) -> None:
    """Move a file to `dest` (which must not exist) so that a crash or a power loss at any moment leaves a
    complete file at one path or both, never a truncated one and never none.

    On one file system this is a rename. Across file systems the bytes go to a temporary name beside `dest`,
    are synced, checked against the source and only then get `dest`'s name (a hard link, which refuses to
    replace anything); the destination folder is synced before the source is unlinked, and the source folder
    after. The file keeps its mode and times.
    """
    src, dest = Path(src), Path(dest)
    if os.path.lexists(dest):
        raise FileExistsError(errno.EEXIST, "refusing to overwrite", str(dest))
    try:
        os.rename(src, dest)  # same file system: atomic, byte-identical, keeps mode and mtime
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
        _copy_across(src, dest)
        os.unlink(src)
    fsync_dir(dest.parent)
    fsync_dir(src.parent)


def partial_copies(dest: Path | str) -> list[Path]:
    """Temporary files a `durable_move` to `dest` left behind when it was killed mid-copy (never `dest` itself)."""
    dest = Path(dest)
    return sorted(dest.parent.glob(f".{glob.escape(dest.name)}.*{PART_SUFFIX}"))


PART_SUFFIX = ".part"


def _copy_across(src: Path, dest: Path) -> None:
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=PART_SUFFIX)
    try:
        with os.fdopen(fd, "wb") as out, open(src, "rb") as inp:
            shutil.copyfileobj(inp, out, 1024 * 1024)
            out.flush()
            os.fsync(out.fileno())
        shutil.copystat(src, tmp)  # mode and times: a 0600 photo stays 0600
        if file_digest(tmp) != file_digest(src):
            raise MoveVerifyError(errno.EIO, f"the copy of {src} did not read back the same; the source was left "
                                             "in place", str(dest))
        try:
            os.link(tmp, dest)  # the final name appears complete, and never over an existing file
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK) or os.path.lexists(dest):
                raise
            os.rename(tmp, dest)  # a file system without hard links (FAT, some network mounts)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    fsync_dir(dest.parent)  # the new name is on disk before the only other copy goes
