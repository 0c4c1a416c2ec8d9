"""One process at a time moves files: a lock file beside the trash folder, held while files move or recovery runs.

    with folder_lock(cat):          # waits up to LOCK_WAIT_S, then raises FolderBusy naming the holder
        ...move files, append to the manifest...

`trash_files`, `restore`, `recover` and `scan` take it themselves, so the command line, the review UI and the
Python API all queue behind each other; reading (groups, the trash listing) does not need it. The lock is
`fcntl.flock` on `<trash folder>.lock`: the kernel drops it when its holder exits or is killed, so a crash
never leaves the folder locked. Inside one process it is re-entrant (a delete runs recovery first) and it
serialises threads too. The file records who holds it, so a second process can say whom it waited for.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from servelab.errors import ServelabError

LOCK_WAIT_S = 10.0  # a delete or an undo takes well under a second; a scan of a large folder can take longer


class FolderBusy(ServelabError, RuntimeError):
    """Another process is moving files in this photo folder (or scanning it); nothing was changed."""


@dataclass
class _Held:
    thread_lock: threading.RLock = field(default_factory=threading.RLock)
    fd: int | None = None
    depth: int = 0


_held: dict[str, _Held] = {}
_held_guard = threading.Lock()


def lock_path(cat) -> Path:
    trash = Path(cat.trash_dir)
    return trash.parent / f"{trash.name}.lock"


@contextlib.contextmanager
def folder_lock(cat, wait_s: float | None = None) -> Iterator[None]:
    """Hold the photo folder's lock for the block; `wait_s` (default: the catalog's `lock_wait_s`, else
    LOCK_WAIT_S) bounds the wait."""
    if wait_s is None:
        wait_s = LOCK_WAIT_S if getattr(cat, "lock_wait_s", None) is None else cat.lock_wait_s
    path = lock_path(cat)
    with _held_guard:
        held = _held.setdefault(str(path.resolve()), _Held())
    deadline = time.monotonic() + wait_s
    if not held.thread_lock.acquire(timeout=max(wait_s, 0)):
        raise FolderBusy(_busy_message(path, wait_s))
    try:
        if held.depth == 0:
            held.fd = _acquire(cat, path, deadline, wait_s)
        held.depth += 1
        try:
            yield
        finally:
            held.depth -= 1
            if held.depth == 0:
                os.close(held.fd)  # closing the last descriptor releases the flock
                held.fd = None
    finally:
        held.thread_lock.release()


def _acquire(cat, path: Path, deadline: float, wait_s: float) -> int:
    from servelab.dedup.catalog import file_mode_of, folder_mode_of
    from servelab.fileio import make_dirs

    make_dirs(path.parent, lambda p: folder_mode_of(cat.root))
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, file_mode_of(cat.root))
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise FolderBusy(_busy_message(path, wait_s)) from None
                time.sleep(0.05)
        holder = f"{os.getpid()} {time.time():.0f} {_command()}\n".encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, holder, 0)
    except BaseException:
        os.close(fd)
        raise
    return fd


def holder(path: Path) -> str:
    """Who holds the lock, as its file says: 'process 123 (servelab dedup scan …), since 14:02:11'."""
    try:
        pid, since, command = (path.read_text(errors="replace").strip().split(" ", 2) + ["", ""])[:3]
        when = time.strftime("%H:%M:%S", time.localtime(float(since)))
    except (OSError, ValueError):
        return "another process"
    return f"process {pid} ({command[:120] or 'unknown command'}), since {when}"


def _command() -> str:
    """This process's command line as the user typed it (`python -m servelab.cli dedup …` reads as `servelab dedup …`)."""
    argv0 = Path(sys.argv[0]) if sys.argv and sys.argv[0] else Path("python")
    name = "servelab" if argv0.name == "servelab" or argv0.parts[-2:] == ("servelab", "cli.py") else argv0.name
    return " ".join([name, *sys.argv[1:]])[:300]


def _busy_message(path: Path, wait_s: float) -> str:
    return (f"the photo folder is busy: {holder(path)} holds {path}; waited {wait_s:g} s. Let it finish "
            f"(or stop it) and run this again")
