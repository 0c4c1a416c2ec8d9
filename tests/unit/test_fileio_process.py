"""The shared helpers every writer and every server lifecycle relies on: atomic writes and managed processes."""

from __future__ import annotations

import sys
import time

import pytest

from servelab.fileio import atomic_path, atomic_write, file_digest
from servelab.managed_process import ManagedProcess, pid_alive
from servelab.netutil import free_port


def test_atomic_write_replaces_and_leaves_no_temp(tmp_path):
    path = tmp_path / "sub" / "table.csv"
    atomic_write(path, "a,b\n")
    atomic_write(path, b"a,b\n1,2\n")
    assert path.read_text() == "a,b\n1,2\n"
    assert [p.name for p in path.parent.iterdir()] == ["table.csv"]


def test_a_failed_write_keeps_the_old_file(tmp_path):
    path = tmp_path / "plot.png"
    path.write_bytes(b"old")
    with pytest.raises(RuntimeError), atomic_path(path, suffix=".png") as tmp:
        tmp.write_bytes(b"half a pl")
        raise RuntimeError("disk full")
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["plot.png"]


def test_written_files_are_readable_by_other_users_as_open_would_make_them(tmp_path):
    """Containers read the export and the staged configs as another uid: mkstemp's private 0600 locks them out."""
    import os
    import stat

    old = os.umask(0o022)
    try:
        text = atomic_write(tmp_path / "config.pbtxt", "name: 'm'\n")
        with atomic_path(tmp_path / "model.onnx", suffix=".onnx") as tmp:
            tmp.write_bytes(b"onnx")
        os.umask(0o077)
        private = atomic_write(tmp_path / "secret.json", "{}")
    finally:
        os.umask(old)
    assert stat.S_IMODE(text.stat().st_mode) == 0o644
    assert stat.S_IMODE((tmp_path / "model.onnx").stat().st_mode) == 0o644
    assert stat.S_IMODE(private.stat().st_mode) == 0o600  # a stricter umask is still honoured


def test_file_digest_is_the_hash_of_the_bytes(tmp_path):
    import hashlib

    path = tmp_path / "f"
    path.write_bytes(b"servelab" * 1000)
    assert file_digest(path) == hashlib.sha256(b"servelab" * 1000).hexdigest()
    assert file_digest(path, "md5") == hashlib.md5(b"servelab" * 1000).hexdigest()


SERVER = """
import http.server, subprocess, sys
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
open(sys.argv[2], "w").write(str(child.pid))
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), http.server.SimpleHTTPRequestHandler).serve_forever()
"""


class Forking(ManagedProcess):
    """A server with a worker process, like LitServe: stopping it must stop the worker too."""

    name = "forking server"

    def __init__(self, tmp_path, script=SERVER):
        super().__init__(log_path=tmp_path / "server.log", startup_timeout=30, stop_timeout=5)
        self.port, self.script, self.child_file = free_port(), script, tmp_path / "child.pid"
        self.cwd = str(tmp_path)

    @property
    def ready_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def command(self) -> list[str]:
        return [sys.executable, "-c", self.script, str(self.port), str(self.child_file)]

    def ports(self):
        return {"test": (self.port, "--port")}


def test_stop_ends_the_whole_process_group(tmp_path):
    with Forking(tmp_path) as srv:
        leader, worker = srv.pid, int(srv.child_file.read_text())
        assert pid_alive(leader) and pid_alive(worker)
    deadline = time.monotonic() + 5
    while pid_alive(worker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not pid_alive(leader) and not pid_alive(worker)


def test_a_server_that_exits_is_one_line_naming_its_log(tmp_path):
    srv = Forking(tmp_path, script="import sys; print('cannot bind'); sys.exit(3)")
    with pytest.raises(RuntimeError) as e:
        srv.start()
    msg = str(e.value)
    assert "forking server did not become ready" in msg and "exited with code 3" in msg
    assert str(tmp_path / "server.log") in msg and "\n" not in msg
    assert "cannot bind" in (tmp_path / "server.log").read_text()
    assert not srv.running()


def test_a_paused_process_group_stops_at_once_not_at_the_kill_timeout():
    """A server an A/B had paused (SIGSTOP) when its run was stopped: the SIGTERM is continued and handled at
    once; a stopped group would otherwise sit until the SIGKILL timeout and never run its own shutdown."""
    import os
    import signal
    import subprocess

    from servelab.managed_process import stop_process_group

    proc = subprocess.Popen([sys.executable, "-c", "import signal, sys, time; print('up', flush=True); "
                             "signal.signal(signal.SIGTERM, lambda *a: sys.exit(3)); time.sleep(60)"],
                            start_new_session=True, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "up"
    time.sleep(0.2)  # the handler is installed right after the print
    os.killpg(proc.pid, signal.SIGSTOP)
    t0 = time.monotonic()
    assert stop_process_group(proc.pid, timeout=8, proc=proc) == 3  # its own handler ran, not SIGKILL
    assert time.monotonic() - t0 < 5


def test_durable_move_across_file_systems_keeps_bytes_mode_and_times_and_never_overwrites(tmp_path):
    """/dev/shm is a tmpfs: the move there is a real copy, sync, link and unlink, not a rename."""
    import os
    import shutil
    import stat
    from pathlib import Path

    from servelab.fileio import durable_move, partial_copies

    shm = Path("/dev/shm")
    if not shm.is_dir() or os.stat(shm).st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("needs /dev/shm on a file system other than the temporary folder's")
    dest_dir = shm / f"servelab-fileio-{os.getpid()}"
    dest_dir.mkdir()
    try:
        src = tmp_path / "photo.jpg"
        src.write_bytes(b"\xff\xd8" + bytes(range(256)) * 4000)
        os.chmod(src, 0o640)
        os.utime(src, ns=(1_600_000_000_000_000_000, 1_600_000_000_000_000_000))
        digest = file_digest(src)
        durable_move(src, dest_dir / "photo.jpg")
        moved = dest_dir / "photo.jpg"
        assert not src.exists() and file_digest(moved) == digest
        assert stat.S_IMODE(moved.stat().st_mode) == 0o640 and moved.stat().st_mtime_ns == 1_600_000_000_000_000_000
        assert partial_copies(moved) == [] and [p.name for p in dest_dir.iterdir()] == ["photo.jpg"]
        src.write_bytes(b"another photo")
        with pytest.raises(FileExistsError):
            durable_move(src, moved)  # refuses to replace what is there
        assert file_digest(moved) == digest and src.read_bytes() == b"another photo"
        durable_move(moved, tmp_path / "back.jpg")  # and back again
        assert file_digest(tmp_path / "back.jpg") == digest and not moved.exists()
    finally:
        shutil.rmtree(dest_dir, ignore_errors=True)
