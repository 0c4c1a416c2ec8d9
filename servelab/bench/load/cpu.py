"""CPU use beside each measurement, and pinning client and server to separate cores.

On a small machine the load generator competes with the server for the same cores, so a throughput figure
means little without knowing what the client itself burnt. `CpuMeter` is a load-generator *meter* (see
servelab.bench.load: `start()`, then `stop() -> dict` merged into the record) that reports, over the
measured windows, in percent of one core:

    loadgen_cpu_pct         the load generator's worker threads (request building, serialisation, parsing)
    client_process_cpu_pct  the whole client process (also client-library helper threads, e.g. gRPC's;
                            for an in-process engine this is the engine's compute)
    server_cpu_pct          the server process with its child processes, all threads (when its pid is known)
    link_cpu_pct            the link relay process (when a shaped link is used)
    cpu_cores               cores this process may run on; cpu_pinning: which placement was used

`pinned(server_pids, ...)` pins this process to some cores and the servers to the others where the OS allows
(Linux `sched_setaffinity`, every thread of each process), restoring the old masks afterwards; it says what
it did or why it could not. Processes started inside the block inherit the client's cores (a notebook's
kernel started by the lab runner: wanted; a server a notebook starts itself: it shares the client's cores);
the lab runner gives its kernels the placement text in their environment (PINNING_ENV, read into
Settings.cpu_pinning), which their meters report.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator

import psutil

LOAD_THREAD_PREFIXES = ("load", "open")  # the names the load loops give their worker threads
NOT_PINNED = "not pinned (client and server share every core)"
PINNING_ENV = "SERVELAB_CPU_PINNING"  # the variable a child process is given the placement in (Settings.cpu_pinning)


def _cpu_s(proc: psutil.Process | None) -> float | None:
    """User + system CPU seconds of a process and its live descendants (Triton computes in python-backend stub
    processes, not in tritonserver itself); None when the process is gone or unreadable."""
    if proc is None:
        return None
    try:
        family = [proc, *proc.children(recursive=True)]
    except (psutil.Error, OSError):
        return None
    total = 0.0
    for p in family:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except (psutil.Error, OSError):
            continue
    return total


def _load_threads_s() -> float:
    """CPU seconds of this process's load-generator threads (matched by name, read from /proc by psutil)."""
    ids = {t.native_id for t in threading.enumerate() if t.name.startswith(LOAD_THREAD_PREFIXES)}
    try:
        return sum(t.user_time + t.system_time for t in psutil.Process().threads() if t.id in ids)
    except (psutil.Error, OSError):
        return 0.0


class CpuMeter:
    """Meter for closed_loop / interleaved / open_loop: CPU of load threads, client, server and link process."""

    def __init__(self, server_pid: int | None = None, link_pid: int | None = None, pinning: str | None = None):
        self.procs = {"client_process": psutil.Process(), "server": _process(server_pid), "link": _process(link_pid)}
        self.pinning = pinning

    def start(self) -> None:
        # processes first here and last in stop(), so each process's span contains the load threads' span
        self._wall = time.perf_counter()
        self._before = {k: _cpu_s(p) for k, p in self.procs.items()}
        self._threads = _load_threads_s()

    def stop(self) -> dict:
        wall = time.perf_counter() - self._wall
        threads = _load_threads_s()  # threads that ended since start() are missing: call stop() before joining
        after = {k: _cpu_s(p) for k, p in self.procs.items()}

        def pct(a, b):
            return None if a is None or b is None or wall <= 0 else round(100.0 * (b - a) / wall, 1)

        out = {"loadgen_cpu_pct": pct(self._threads, threads)}
        for k in self.procs:
            out[f"{k}_cpu_pct"] = pct(self._before[k], after[k])
        out.update(cpu_cores=len(_affinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
                   cpu_pinning=self.pinning or current_pinning())
        return out


def _process(pid: int | None) -> psutil.Process | None:
    if not pid:
        return None
    try:
        return psutil.Process(pid)
    except psutil.Error:
        return None


# --- pinning ------------------------------------------------------------------------------------------

_pinning = threading.local()


def current_pinning(settings=None) -> str:
    """What `pinned` set up for this thread, or for the process that started this one (`settings.cpu_pinning`,
    default: from the environment), or that nothing is."""
    from servelab.config import Settings

    inherited = (settings or Settings.from_env()).cpu_pinning
    return getattr(_pinning, "text", None) or inherited or NOT_PINNED


def _affinity(pid: int) -> set[int]:
    return set(os.sched_getaffinity(pid))


def _tasks(pid: int) -> list[int]:
    """Every thread id of a process (sched_setaffinity on a pid moves only its main thread)."""
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return [pid]


def _family(pid: int) -> list[int]:
    """A process and its descendants (tritonserver's python-backend stubs do the computing)."""
    try:
        return [pid, *(c.pid for c in psutil.Process(pid).children(recursive=True))]
    except psutil.Error:
        return [pid]


def _set(pid: int, cores: set[int], descendants: bool = True) -> dict[int, set[int]]:
    """Pin every thread of `pid` (and of its descendants) to `cores`; returns each thread's old mask."""
    old = {}
    for tid in (t for p in (_family(pid) if descendants else [pid]) for t in _tasks(p)):
        try:
            old[tid] = _affinity(tid)
            os.sched_setaffinity(tid, cores)
        except (ProcessLookupError, PermissionError):
            pass
    return old


def _restore(old: dict[int, set[int]]) -> None:
    for tid, cores in old.items():
        try:
            os.sched_setaffinity(tid, cores)
        except (ProcessLookupError, PermissionError, OSError):
            pass


def _pids(server_pids) -> list[int]:
    items = server_pids if isinstance(server_pids, (list, tuple, set)) else [server_pids]
    return [int(p) for p in items if p]


def plan_cores(server_pids, client_cores: int | None = None) -> tuple[set[int], set[int]] | str:
    """(client cores, server cores) splitting the cores this process may use, or why pinning is not possible."""
    if not hasattr(os, "sched_setaffinity"):
        return "not pinned: this OS has no sched_setaffinity"
    pids = _pids(server_pids)
    if not pids or not all(psutil.pid_exists(p) for p in pids):
        return "not pinned: the server's process is not on this machine"
    cores = sorted(_affinity(0))
    if len(cores) < 2:
        return f"not pinned: only {len(cores)} core available"
    n = client_cores or max(1, len(cores) // 4)
    n = min(n, len(cores) - 1)
    return set(cores[:n]), set(cores[n:])


@contextlib.contextmanager
def pinned(server_pids, client_cores: int | None = None, enabled: bool = True) -> Iterator[str]:
    """Pin this process (the client) and the server process(es) to separate cores for the block; yields what
    was done. `client_cores`: how many cores the client gets (default a quarter, at least one); the servers
    share the rest. With `enabled=False` (or where pinning is impossible) nothing changes and the text says so.
    """
    plan = plan_cores(server_pids, client_cores) if enabled else NOT_PINNED
    old: dict[int, set[int]] = {}
    if isinstance(plan, str):
        text = plan
    else:
        client, server = plan
        try:
            old.update(_set(os.getpid(), client, descendants=False))  # what it starts from now on inherits this
            for pid in _pids(server_pids):
                for tid, mask in _set(pid, server).items():
                    old.setdefault(tid, mask)
        except Exception:
            _restore(old)
            raise
        text = f"client on core(s) {','.join(map(str, sorted(client)))}, server on {','.join(map(str, sorted(server)))}"
    _pinning.text = text
    try:
        yield text
    finally:
        _pinning.text = None
        _restore(old)
