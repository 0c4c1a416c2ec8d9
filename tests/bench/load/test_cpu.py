"""CpuMeter reads real CPU time of real threads and processes; pinned() really moves them and restores them."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

from servelab.bench.load.cpu import NOT_PINNED, CpuMeter, current_pinning, pinned, plan_cores
from servelab.config import Settings


def _spin(stop: threading.Event) -> None:
    x = 0
    while not stop.is_set():
        x += 1


def _idle(stop: threading.Event) -> None:
    stop.wait()


@pytest.fixture()
def server():
    """A stand-in server process with a few threads (sleeping), as a real server's thread pool would be."""
    code = "import threading,time\n[threading.Thread(target=time.sleep,args=(30,),daemon=True).start() for _ in range(3)]\n" \
           "time.sleep(30)"
    proc = subprocess.Popen([sys.executable, "-c", code])
    time.sleep(0.3)
    yield proc
    proc.kill()
    proc.wait()


def _measure(target, server_pid=None) -> tuple[dict, float, float, float, float]:
    """The meter's figures over 0.4 s of `target` running in a thread named like a load worker, with the
    thread's CPU share (read from its own CPU clock, not through psutil) bracketed around the meter's own
    start and stop: the least and the most it can have been over the meter's window."""
    stop = threading.Event()
    t = threading.Thread(target=target, args=(stop,), name="load-0", daemon=True)
    t.start()
    clock = time.pthread_getcpuclockid(t.ident)
    meter = CpuMeter(server_pid=server_pid)
    c_a, t_a = time.clock_gettime(clock), time.perf_counter()
    meter.start()
    c_b, t_b = time.clock_gettime(clock), time.perf_counter()
    time.sleep(0.4)
    c_c, t_c = time.clock_gettime(clock), time.perf_counter()
    out = meter.stop()  # before the thread ends, as the load generator does
    c_d, t_d = time.clock_gettime(clock), time.perf_counter()
    stop.set()
    t.join()
    tick = 0.01  # psutil reads thread times in clock ticks
    least = max(0.0, c_c - c_b - 2 * tick) / (t_d - t_a)
    most = (c_d - c_a + 2 * tick) / (t_c - t_b)
    return out, least, most, c_c - c_b, t_c - t_b


def test_meter_sees_a_busy_load_thread_and_an_idle_server(server):
    busy, least, most, own_s, _ = _measure(_spin, server.pid)
    # on a shared machine the spinning thread gets what it gets; the meter must report exactly that share,
    # up to what the thread could run between the meter's reads and ours
    assert own_s > 0.02, "the spinning thread got no CPU at all"
    assert least <= busy["loadgen_cpu_pct"] / 100 <= most, (busy, least, most)
    assert busy["client_process_cpu_pct"] >= busy["loadgen_cpu_pct"] - 5
    assert busy["server_cpu_pct"] is not None and busy["server_cpu_pct"] < 10, busy
    assert busy["link_cpu_pct"] is None  # no link process given
    assert busy["cpu_pinning"] == NOT_PINNED and busy["cpu_cores"] >= 1
    idle, _, _, own_s, _ = _measure(_idle)
    assert idle["loadgen_cpu_pct"] < 5 and own_s < 0.01, idle
    assert idle["server_cpu_pct"] is None


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="pinning needs Linux sched_setaffinity and at least 2 cores")
def test_pinned_separates_client_and_server_then_restores(server):
    mine, theirs = os.sched_getaffinity(0), os.sched_getaffinity(server.pid)
    client_cores, server_cores = plan_cores(server.pid, client_cores=1)
    with pinned(server.pid, client_cores=1) as how:
        assert os.sched_getaffinity(0) == client_cores
        for tid in os.listdir(f"/proc/{server.pid}/task"):  # every thread, not only the main one
            assert os.sched_getaffinity(int(tid)) == server_cores
        assert not client_cores & server_cores
        assert how.startswith("client on core(s)")
        meter = CpuMeter(server_pid=server.pid)
        meter.start()
        assert meter.stop()["cpu_pinning"] == how
        assert "SERVELAB_CPU_PINNING" not in os.environ  # a child is given it explicitly (the lab runner's kernels)
    assert os.sched_getaffinity(0) == mine and os.sched_getaffinity(server.pid) == theirs


def test_a_child_reports_the_pinning_its_parent_gave_it():
    assert current_pinning(Settings(cpu_pinning="client on core(s) 0, server on 1")) == "client on core(s) 0, server on 1"
    assert current_pinning(Settings()) == NOT_PINNED


def test_pinned_says_why_not():
    with pinned(None) as how:
        assert "not pinned" in how and "server" in how
    with pinned(os.getpid(), enabled=False) as how:
        assert how == NOT_PINNED


def test_a_servers_child_processes_are_counted_and_pinned():
    """Triton computes in python-backend stub processes under tritonserver: they count and move with it."""
    import psutil

    spin = "import time\nt = time.time()\nwhile time.time() - t < 20: pass"
    code = f"import subprocess, sys, time\nsubprocess.Popen([sys.executable, '-c', {spin!r}])\ntime.sleep(20)"
    parent = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.time() + 5
        while not psutil.Process(parent.pid).children() and time.time() < deadline:
            time.sleep(0.05)
        child = psutil.Process(parent.pid).children()[0]
        meter = CpuMeter(server_pid=parent.pid)
        meter.start()
        time.sleep(0.5)
        assert meter.stop()["server_cpu_pct"] >= 2  # the parent only sleeps: this is the child's spinning
        if hasattr(os, "sched_setaffinity") and len(os.sched_getaffinity(0)) >= 2:
            _, server_cores = plan_cores(parent.pid, client_cores=1)
            before = os.sched_getaffinity(child.pid)
            with pinned(parent.pid, client_cores=1):
                assert os.sched_getaffinity(child.pid) == server_cores
            assert os.sched_getaffinity(child.pid) == before
    finally:
        for p in psutil.Process(parent.pid).children(recursive=True):
            p.kill()
        parent.kill()
        parent.wait()
