"""Writing files so that a reader never sees half of one, and naming a file's content by its digest.

A crash or a full disk during a write leaves the previous file (or none), never a truncated one: content goes
to a uniquely named temporary file in the same folder (two writers never share it), is flushed to disk, and
is renamed over the destination in one step. The file gets the mode a plain `open()` would give it (0666 less
the umask), not mkstemp's private 0600: an export or a staged config is read by containers running as other users.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path


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
