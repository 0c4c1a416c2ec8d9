"""The idle side of an interleaved comparison: what it costs while it waits, and stopping it while it waits.

Interleaving two live servers cancels the machine's drift, but not what the waiting server does to the one
being measured: its background threads (polling loops, health checks, stub monitors) keep taking CPU from
the other's windows. On a 2-core machine an idle server that uses 20 % of one core takes a tenth of the
machine from its rival, and that lands in the ratio. So each side's *idle cost* — CPU seconds per wall
second of its whole process group while nothing is sent to it, reported in % of one core — is measured
before the comparison and recorded beside the ratio, and each side's process group is stopped (SIGSTOP)
during the other side's warm-up and windows and continued (SIGCONT) before its own. Its sockets stay open
(the kernel keeps them), so clients find the server as they left it; it is always continued on leaving the
block, on an error or Ctrl-C too.

    with IdleSides([a.pid, b.pid], labels=["fastapi", "litserve"]) as idle:   # idle cost measured here
        idle.run_only(0)     # side 0 runs; side 1's process group is stopped
        ...
        idle.run_only(1)
    idle.sides[1].idle_cpu_pct, idle.sides[1].paused, idle.sides[1].how

Only a server this machine started can be stopped: a local process that leads its own process group (every
server `servelab.managed_process` starts does). A remote or containerised server (no local pid), the engine
running in this process, or one process serving both sides is not paused, and the record says why; when one
server (or the engine in this process) is both sides, no idle cost is measured either: there is no rival.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass

import psutil

SETTLE_S = 0.25  # after SIGCONT: the server's overdue timers run (e.g. closing idle keep-alive connections)


@dataclass
class IdleSide:
    """One side of a comparison: its process group (when it can be stopped), its idle cost, what was done."""

    label: str
    pid: int | None
    group: int | None          # the process group to stop, or None when it cannot be
    how: str                   # what was done while the other side ran, or why nothing was
    idle_cpu_pct: float | None = None  # % of one core its processes used while idle, before the comparison
    paused: bool = False       # was it stopped during the other side's windows
    stopped: bool = False      # is it stopped right now


def stoppable_group(pid: int | None) -> int | str:
    """The process group led by `pid`, which can be stopped and continued as a whole, or why it cannot."""
    if not pid:
        return "not paused: no local process (a remote or containerised server, or the engine in this process)"
    if pid == os.getpid():
        return "not paused: the engine runs in this process"
    try:
        group = os.getpgid(pid)
    except ProcessLookupError:
        return f"not paused: process {pid} is not running on this machine"
    if group != pid:
        return f"not paused: process {pid} does not lead its own process group"
    if group == os.getpgrp():
        return f"not paused: process {pid} shares this process's group"
    return group


def _group_members(group: int) -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            if os.getpgid(p.pid) == group:
                out.append(p)
    return out


def _family(pid: int) -> list[psutil.Process]:
    with contextlib.suppress(psutil.Error):
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    return []


def _cpu_s(procs: list[psutil.Process]) -> dict[int, float]:
    out = {}
    for p in procs:
        with contextlib.suppress(psutil.Error, OSError):
            t = p.cpu_times()
            out[p.pid] = t.user + t.system + t.children_user + t.children_system
    return out


def _processes(pid: int | None) -> list[psutil.Process]:
    """A server's processes: its process group, else the process and its descendants (this process alone
    when the engine runs here: the servers it started are not the engine)."""
    if not pid:
        return []
    if pid == os.getpid():
        return [psutil.Process()]
    group = stoppable_group(pid)
    return _group_members(group) if isinstance(group, int) else _family(pid)


def idle_cpu_pct(pids: list[int | None], seconds: float = 2.0) -> list[float | None]:
    """% of one core each server's processes used over the same `seconds` while nothing is sent to any of
    them; None for a server with no local process."""
    procs = [_processes(pid) for pid in pids]
    before = [_cpu_s(ps) for ps in procs]
    t0 = time.perf_counter()
    time.sleep(seconds)
    after = [_cpu_s(ps) for ps in procs]
    wall = time.perf_counter() - t0
    return [round(100.0 * sum(a[k] - b[k] for k in a.keys() & b.keys()) / wall, 1) if ps else None
            for ps, b, a in zip(procs, before, after, strict=True)]


def _signal(group: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, sig)


def _wait_stopped(group: int, timeout_s: float = 2.0) -> None:
    """Return once every process of the group has stopped (a signal is delivered asynchronously), or after
    `timeout_s`: the other side's window must not open while this one still runs."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        states = []
        for p in _group_members(group):
            with contextlib.suppress(psutil.Error):
                states.append(p.status())
        if all(st in (psutil.STATUS_STOPPED, psutil.STATUS_ZOMBIE) for st in states):
            return
        time.sleep(0.005)


class IdleSides:
    """Measures each side's idle cost on entering; `run_only(k)` continues side k and stops every other side
    that can be stopped; leaving the block continues every side it stopped (also on errors and Ctrl-C).

    `pause=False` measures and records the idle cost but stops nothing (the comparison as it was before)."""

    def __init__(self, pids: list[int | None], labels: list[str] | None = None, *, pause: bool = True,
                 probe_s: float = 2.0, settle_s: float = SETTLE_S):
        labels = labels or [f"side {k}" for k in range(len(pids))]
        self.pause, self.probe_s, self.settle_s = pause, probe_s, settle_s
        self.sides = []
        for k, (pid, label) in enumerate(zip(pids, labels, strict=True)):
            group = stoppable_group(pid)
            if isinstance(group, int) and pid in pids[:k] + pids[k + 1:]:
                group = "not paused: both sides are one server"
            if isinstance(group, int) and not pause:
                group = "not paused (pausing turned off for this comparison)"
            self.sides.append(IdleSide(label=label, pid=pid, group=group if isinstance(group, int) else None,
                                       how=(f"stopped (SIGSTOP to process group {group}) during the other side's "
                                            "windows, continued (SIGCONT) before its own")
                                       if isinstance(group, int) else group))

    def __enter__(self) -> IdleSides:
        pids = [s.pid for s in self.sides]
        if len(set(pids)) < 2:  # one server on both sides (or none here): no rival to measure, nothing to wait for
            return self
        for side, cost in zip(self.sides, idle_cpu_pct(pids, self.probe_s), strict=True):
            side.idle_cpu_pct = cost
        return self

    def run_only(self, k: int) -> None:
        """Side k runs; every other stoppable side is stopped. Waits `settle_s` after continuing side k."""
        for j, side in enumerate(self.sides):
            if j != k and side.group is not None and not side.stopped:
                side.stopped = side.paused = True  # marked first: an interrupt between the two still continues it
                _signal(side.group, signal.SIGSTOP)
                _wait_stopped(side.group)
        me = self.sides[k]
        if me.stopped:
            self._continue(me)
            time.sleep(self.settle_s)

    def _continue(self, side: IdleSide) -> None:
        _signal(side.group, signal.SIGCONT)
        side.stopped = False

    def continue_all(self) -> None:
        for side in self.sides:
            if side.stopped:
                self._continue(side)

    def __exit__(self, *exc) -> None:
        self.continue_all()

    def record_fields(self, k: int) -> dict:
        """Side k's idle cost and what was done while it waited, as record fields."""
        side = self.sides[k]
        return {"idle_cpu_pct": side.idle_cpu_pct, "idle_paused": side.paused, "idle_side": side.how}
