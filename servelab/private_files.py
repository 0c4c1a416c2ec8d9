"""This user's own folders and files in a shared place (the temporary folder), where another user may take a name
first or plant a symbolic link: a folder is created 0700 and refused unless it is a real folder of this user that
no one else may write, and a file is opened without following a link, created 0600, and refused unless it is a
regular file of this user. Triton's log, trace and key files and the emulated devices' state live in such folders.

    folder = private_folder(Path(tempfile.gettempdir()) / f"servelab-{os.getuid()}", fix="set TMPDIR to …")
    fd = open_private(folder / "triton-8003.log")          # O_WRONLY | O_APPEND unless other flags are given
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from servelab.errors import ServelabError


class UnsafePath(ServelabError, RuntimeError):
    """A folder or file in a shared place that cannot be trusted (a link, another user's, writable by others); the
    message says what to remove or set."""


def private_folder(path: Path, fix: str = "remove it") -> Path:
    """`path`, created 0700 (with its parents) if missing; refused if it is a link, not a folder, another user's,
    or writable by others (something may have been planted in it), and narrowed to 0700 if others may only read."""
    path = Path(path)
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise UnsafePath(f"{path} is a symbolic link or not a folder: servelab keeps its files only in a real folder "
                         f"of yours; {fix}")
    if st.st_uid != os.getuid() or st.st_mode & 0o022:
        raise UnsafePath(f"{path} belongs to another user or others may write to it (mode "
                         f"{stat.S_IMODE(st.st_mode):o}); {fix}")
    if stat.S_IMODE(st.st_mode) != 0o700:
        os.chmod(path, 0o700)
    return path


def open_private(path: Path | str, flags: int = os.O_WRONLY | os.O_APPEND) -> int:
    """A file descriptor on `path`, created 0600 if missing, never through a symbolic link, and refused unless it
    is a regular file of this user."""
    try:
        fd = os.open(path, flags | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # the last part of the path is a symbolic link
            raise UnsafePath(f"{path} is a symbolic link; remove it (servelab never writes through one)") from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid():
        os.close(fd)
        raise UnsafePath(f"{path} is not a regular file of this user; remove it")
    return fd
