"""The idle side of an interleaved comparison, on real servers on loopback: its idle cost goes into the records,
stopping and continuing it leaves it answering, and a server made busy while idle no longer moves the ratio
once it is stopped during its rival's windows (while without the pause it drags the rival down)."""

from __future__ import annotations

import contextlib
import shlex
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import psutil
import pytest

from servelab.bench.experiments import Side, ab
from servelab.bench.load import LoadOpts
from servelab.bench.load.idle import IdleSides, idle_cpu_pct, stoppable_group
from servelab.bench.load.inputs import sample_jpegs, sample_tensor
from servelab.bench.results.records import Run
from servelab.bench.servers import attach, served
from servelab.managed_process import stop_process_group
from servelab.netutil import wait_http
from servelab.service.process import ServiceProcess

pytestmark = pytest.mark.usefixtures("quiet_machine")  # ratios that spare CPU moves

BURNER = Path(__file__).with_name("idle_burner.py")
BURNERS = 6  # against the service's few threads: a rival sharing their scheduling group gets a small part of it


@contextlib.contextmanager
def service_in_this_session(log: Path, *, burners: int = 0):
    """The real service in its own process group but in this session, so that on Linux (where each session is
    one CPU scheduling group) it, its rival and the load generator share one group's CPU thread by thread. With
    `burners`, idle_burner.py runs in the service's process group, spinning whenever the service is idle."""
    svc = ServiceProcess(env={"SERVELAB_MAX_QUEUE": "256"})
    cmd = shlex.join(svc.command())
    if burners:
        cmd = f"{shlex.join([sys.executable, str(BURNER), '--burners', str(burners)])} & exec {cmd}"
    with open(log, "ab") as out:
        proc = subprocess.Popen(["/bin/sh", "-c", cmd], env=svc.environment(), stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, process_group=0)
    try:
        assert wait_http(svc.ready_url, timeout=180, proc=proc), log.read_text()[-2000:]
        yield attach("fastapi", svc.url, payload="tensor", pid=proc.pid)
    finally:
        stop_process_group(proc.pid, proc=proc)


def _stopped(pid: int) -> bool:
    return psutil.Process(pid).status() == psutil.STATUS_STOPPED


def _cosine(a, b) -> float:
    a, b = np.asarray(a).ravel(), np.asarray(b).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_what_cannot_be_stopped_says_why():
    import os

    assert "no local process" in stoppable_group(None)
    assert "in this process" in stoppable_group(os.getpid())
    sides = IdleSides([None, os.getpid()], ["remote", "in-process"], probe_s=0.1)
    assert [s.group for s in sides.sides] == [None, None]
    assert all(s.how.startswith("not paused") for s in sides.sides)


@pytest.mark.timeout(20)  # a 60-s idle probe would run past it
def test_one_server_on_both_sides_has_no_idle_rival_to_measure():
    import os

    with IdleSides([os.getpid(), os.getpid()], ["batch 8", "batch 1"], probe_s=60) as sides:
        assert [s.idle_cpu_pct for s in sides.sides] == [None, None]
        assert [s.group for s in sides.sides] == [None, None]


@pytest.mark.triton
def test_stopped_servers_answer_again_over_the_connections_they_held(service, tiny_triton, tiny_factory, tmp_path):
    """The servelab service, LitServe (five processes) and Triton (a python-backend stub) are each stopped longer
    than uvicorn's keep-alive timeout while their clients hold open connections, then continued: each answers
    the same as before, over the same clients, and nothing is left stopped."""
    jpeg = list(sample_jpegs(1))
    with served("litserve", engine="onnx", payload="jpeg", log_path=tmp_path / "litserve.log") as lit:
        svc = attach("fastapi", service.url, payload="jpeg", pid=service.proc.pid)
        clients = [svc.make_client(), lit.make_client(), tiny_factory()(3)]
        calls = [lambda: clients[0].embed_images(jpeg), lambda: clients[1].embed_images(jpeg), clients[2][0]]
        before = [call() for call in calls]
        pids = [svc.pid, lit.pid, tiny_triton.pid]
        with IdleSides(pids, ["fastapi", "litserve", "triton"], probe_s=0.5) as idle:
            assert all(s.group == s.pid for s in idle.sides) and all(s.idle_cpu_pct is not None for s in idle.sides)
            idle.run_only(0)
            assert _stopped(lit.pid) and _stopped(tiny_triton.pid) and not _stopped(svc.pid)
            time.sleep(6)  # past uvicorn's 5 s keep-alive: the stopped servers' timers are overdue on SIGCONT
            assert idle_cpu_pct(pids[1:], 0.5) == [0.0, 0.0]  # a stopped process group uses no CPU at all
            for k in (1, 2, 0):
                idle.run_only(k)
                assert not _stopped(pids[k])
                again = calls[k]()
                assert _cosine(again, before[k]) > 0.9999
        assert not any(_stopped(p) for p in pids)
        assert all(s.paused for s in idle.sides)
        for call, first in zip(calls, before, strict=True):  # everyone answers after the block
            assert _cosine(call(), first) > 0.9999
        for close in (clients[0].close, clients[1].close, clients[2][1]):
            close()


@pytest.mark.triton
def test_ctrl_c_continues_every_stopped_server(tiny_triton):
    with pytest.raises(KeyboardInterrupt), IdleSides([tiny_triton.pid, None], ["triton", "remote"], probe_s=0.1) as idle:
        idle.run_only(1)
        assert _stopped(tiny_triton.pid)
        raise KeyboardInterrupt
    assert not _stopped(tiny_triton.pid)


def test_a_server_busy_while_idle_moves_the_ratio_only_when_it_is_not_stopped(onnx_meta, tmp_path):
    """Two copies of the same service; B's process group burns the CPU whenever B is idle. Unpaused, B burns
    through A's windows and A ÷ B falls far below 1; with B stopped during A's windows the ratio is about 1 again,
    as it is for two quiet copies. The idle costs are in the records either way."""
    run = Run("t", root=tmp_path, weights="random-init")
    opts = LoadOpts(min_requests=4, min_p50s=1.0, max_windows=2, tolerance=0.5, max_warmup_s=10, quick=True)
    x = sample_tensor(1)
    with service_in_this_session(tmp_path / "quiet.log") as quiet, \
            service_in_this_session(tmp_path / "busy.log", burners=BURNERS) as busy:
        busy_answer = busy.make_client().embed_tensor(x)

        def compare(pause: bool):
            return ab(run, "t-idle", Side("quiet", quiet, concurrency=2), Side("busy when idle", busy, concurrency=2),
                      opts=opts, pause_idle=pause)

        qa, qb, unpaused = compare(False)
        pa, pb, paused = compare(True)
        assert _cosine(busy.make_client().embed_tensor(x), busy_answer) > 0.9999  # B answers after
        assert not _stopped(busy.pid) and not _stopped(quiet.pid)

    # the burners, measured before the windows (on a shared machine they get what the other sessions leave)
    assert qb["idle_cpu_pct"] > 25 and pb["idle_cpu_pct"] > 25
    assert qa["idle_cpu_pct"] < 10 and pa["idle_cpu_pct"] < 10  # the service itself idles quietly
    assert paused["idle_cpu_pct_b"] == pb["idle_cpu_pct"] and paused["idle_side_b"].startswith("stopped")
    assert unpaused["idle_side_b"].startswith("not paused") and not qb["idle_paused"] and pb["idle_paused"]
    for rec in (qa, qb, pa, pb):
        assert rec["errors"] == 0 and rec["requests"] > 0
    assert unpaused["ratio"] < 0.5, unpaused            # B's burners took most of the CPU from A's windows
    assert 0.6 < paused["ratio"] < 1.5, paused          # stopped while A ran: two copies of one service again


def test_the_sentence_says_what_each_side_used_idle_and_whether_it_was_stopped():
    from servelab.bench.report import idle_sentence

    both = {"a": "fastapi", "b": "litserve", "idle_cpu_pct_a": 0.2, "idle_cpu_pct_b": 11.0, "idle_paused_a": True,
            "idle_paused_b": True}
    assert idle_sentence(both) == ("While idle, fastapi used 0.2 % of one core and litserve used 11 % of one core; "
                                   "each was stopped during the other's windows, so neither took CPU from the other")
    remote = {**both, "idle_cpu_pct_a": None, "idle_paused_a": False, "idle_side_a": stoppable_group(None)}
    assert idle_sentence(remote).endswith("litserve was stopped during fastapi's windows, fastapi was not: no local "
                                          "process (a remote or containerised server, or the engine in this process)")
    assert "what fastapi used could not be read here" in idle_sentence(remote)
    off = {**both, "idle_paused_a": False, "idle_paused_b": False,
           "idle_side_a": "not paused (pausing turned off for this comparison)", "idle_side_b": "not paused: both"}
    assert idle_sentence(off).endswith("neither was stopped during the other's windows: fastapi, pausing turned off "
                                       "for this comparison; litserve, both")
