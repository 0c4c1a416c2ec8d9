"""A server subprocess this Python starts and owns: the FastAPI service, LitServe, tritonserver.

Every one is started the same way and stopped the same way, so none can outlive its test, benchmark or
lab run: checked ports first, its own process group (session), output appended to a log file whose handle
this process closes right away, ready when its health URL answers (`servelab.netutil.wait_http`), and
stopped with SIGTERM to the whole group, then SIGKILL after `stop_timeout` (workers and stubs included).
Starting fails with one line saying why, quoting the server's own reason from its log where it gives one.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

from servelab.netutil import port_in_use, wait_http


class ManagedProcess:
    """Subclasses say what to run (`command`, `environment`, `cwd`), where readiness shows (`ready_url`),
    which ports must be free (`ports`), and optionally how to read a failure from the log (`fatal_in_log`,
    `failure_reason`)."""

    name = "server"
    error: type[Exception] = RuntimeError
    cwd: str | None = None

    def __init__(self, *, host: str = "127.0.0.1", log_path: Path | str | None = None,
                 startup_timeout: float = 180.0, stop_timeout: float = 10.0):
        self.host = host
        self.log_path = Path(log_path) if log_path else None
        self.startup_timeout, self.stop_timeout = startup_timeout, stop_timeout
        self.proc: subprocess.Popen | None = None

    # --- what subclasses provide ------------------------------------------------------------------
    def command(self) -> list[str]:
        raise NotImplementedError

    @property
    def ready_url(self) -> str:
        raise NotImplementedError

    def environment(self) -> dict:
        return dict(os.environ)

    def ports(self) -> dict[str, tuple[int, str]]:
        """{what: (port, the option that changes it)}; each must be free before starting."""
        return {}

    def fatal_in_log(self, log_text: str) -> str | None:
        """A reason in the log that the server will never become ready (stop waiting now); None if none yet."""
        return None

    def failure_reason(self, log_text: str) -> str | None:
        """Why the server did not become ready, read from its log (for the error message)."""
        return self.fatal_in_log(log_text)

    def check(self) -> None:
        """Refuse to start what cannot work; the default checks the ports."""
        for what, (port, option) in self.ports().items():
            if port_in_use(port, self.host):
                raise self.error(f"{what} port {port} on {self.host} is already in use; "
                                 f"stop what holds it or pick another with {option}")

    # --- lifecycle --------------------------------------------------------------------------------
    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def start(self):
        self.check()
        cmd = self.command()
        log_start = 0
        if self.log_path:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            out = open(self.log_path, "ab")
            out.write(f"\n=== servelab: starting {self.name} {time.strftime('%Y-%m-%dT%H:%M:%S')} ===\n".encode())
            out.flush()
            log_start = out.tell()
        else:
            out = subprocess.DEVNULL
        try:
            self.proc = subprocess.Popen(cmd, env=self.environment(), cwd=self.cwd, stdout=out,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        finally:
            if out is not subprocess.DEVNULL:
                out.close()  # the child holds its own copy
        try:
            ready = wait_http(self.ready_url, timeout=self.startup_timeout, proc=self.proc,
                              give_up=lambda: self.fatal_in_log(self.log_since(log_start)) is not None)
            if not ready:
                raise self.error(self._not_ready(log_start))
        except BaseException:
            self.stop()
            raise
        return self

    def _not_ready(self, log_start: int) -> str:
        code = self.proc.poll()
        reason = self.failure_reason(self.log_since(log_start))
        if reason is None:
            reason = f"exited with code {code}" if code is not None else f"not ready after {self.startup_timeout:.0f} s"
        where = f" (log: {self.log_path})" if self.log_path else ""
        return f"{self.name} did not become ready at {self.ready_url}: {reason}{where}"

    def log_since(self, offset: int = 0) -> str:
        if not self.log_path:
            return ""
        try:
            with open(self.log_path, "rb") as fh:
                fh.seek(offset)
                return fh.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> int | None:
        """Stop the process group; returns the server's exit code (None if it was not started)."""
        if self.proc is None:
            return None
        code = stop_process_group(self.proc.pid, self.stop_timeout, proc=self.proc)
        self.proc = None
        return code

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def pid_alive(pid: int) -> bool:
    """Is `pid` running? A zombie (an exited child not yet reaped) counts as gone."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def _kill_leftovers(pid: int) -> None:
    """SIGKILL what is left of the group after its leader exited (never the pid alone: it may be reused)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):  # no such group (any more): the process alone, if it is there
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def stop_process_group(pid: int, timeout: float = 10.0, proc: subprocess.Popen | None = None) -> int | None:
    """SIGTERM to the process group led by `pid` (started with its own session), SIGKILL to what is left of
    the group after `timeout` s. `proc` when it is our child (its exit code is returned); without it (a server
    started by an earlier command) the pid is watched."""
    if proc is not None and proc.poll() is not None:
        _kill_leftovers(pid)
        return proc.returncode
    _signal_group(pid, signal.SIGTERM)
    _signal_group(pid, signal.SIGCONT)  # a group paused by an A/B (SIGSTOP) handles its SIGTERM now, not at SIGKILL
    deadline = time.monotonic() + timeout
    code: int | None = None
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            code = proc.returncode
            break
        if proc is None and not pid_alive(pid):
            code = 0
            break
        time.sleep(0.1)
    if code is not None:
        _kill_leftovers(pid)
        return code
    _signal_group(pid, signal.SIGKILL)
    return proc.wait(10) if proc is not None else -signal.SIGKILL
