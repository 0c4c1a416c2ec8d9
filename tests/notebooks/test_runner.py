"""The runner's contract on small scratch notebooks (no stack): parameters, --only, failure handling."""

from __future__ import annotations

import json

import pytest

from tests.notebooks.conftest import lab_cli

pytestmark = pytest.mark.notebooks

OK = '''# %% tags=["parameters"]
out_dir = "x"
duration_s = 1.0
place = "local"

# %%
from pathlib import Path
Path(out_dir, "tables").mkdir(parents=True, exist_ok=True)
Path(out_dir, "tables", "{id}_seen.md").write_text(f"| duration_s | place |\\n|---|---|\\n| {{duration_s}} | {{place}} |\\n")
'''

FAIL = '''# %% tags=["parameters"]
out_dir = "x"

# %%
x = 1

# %%
raise ValueError("broken on purpose")
'''


@pytest.fixture()
def scratch(tmp_path):
    from servelab.lab import notebooks as nbs

    d = tmp_path / "nbs"
    d.mkdir()
    (d / "00_first.py").write_text(OK.format(id="00"))
    (d / "01_broken.py").write_text(FAIL)
    (d / "02_after.py").write_text(OK.format(id="02"))
    nbs.sync(nbs.discover(d))
    return d


def test_params_reach_the_notebook_with_types(scratch, tmp_path):
    r = lab_cli("run", "--notebooks", str(scratch), "--only", "00", "--param", "duration_s=0.25", "--profile", "smoke",
                "--results", str(tmp_path / "res"), "--run-id", "p", "--no-progress-bar")
    assert r.returncode == 0, r.stderr
    assert "| 0.25 | local |" in (tmp_path / "res" / "p" / "tables" / "00_seen.md").read_text()
    state = json.loads((tmp_path / "res" / "p" / "run.json").read_text())
    assert [e["name"] for e in state["notebooks"]] == ["00_first"]


def test_a_results_run_measures_the_drift_probe_before_each_notebook_and_at_the_end(scratch, tmp_path, onnx_meta):
    r = lab_cli("run", "--notebooks", str(scratch), "--only", "00", "--only", "02", "--profile", "default",
                "--results", str(tmp_path / "res"), "--run-id", "d", "--no-progress-bar")
    assert r.returncode == 0, r.stderr
    lines = (tmp_path / "res" / "d" / "records.jsonl").read_text().splitlines()
    probes = [json.loads(x) for x in lines if json.loads(x)["kind"] == "probe"]
    # both notebooks take a second: the first probe still describes the machine before 02 and at the end
    assert [p["note"] for p in probes] == ["before 00_first"]
    assert all(p["throughput_img_s"] > 0 and p["engine"] == "onnx" for p in probes)
    assert "drift probe (before 00_first):" in r.stdout + r.stderr
    # a smoke run's numbers are not results: no probe
    r = lab_cli("run", "--notebooks", str(scratch), "--only", "00", "--profile", "smoke",
                "--results", str(tmp_path / "res"), "--run-id", "s", "--no-progress-bar")
    assert r.returncode == 0 and not (tmp_path / "res" / "s" / "records.jsonl").exists()


def test_failure_stops_the_run_names_notebook_and_cell_and_keeps_a_report(scratch, tmp_path):
    r = lab_cli("run", "--notebooks", str(scratch), "--profile", "smoke", "--results", str(tmp_path / "res"),
                "--run-id", "f", "--no-progress-bar")
    assert r.returncode == 1
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("error: notebook 01_broken failed at cell In [") and "ValueError: broken on purpose" in last
    run = tmp_path / "res" / "f"
    report = (run / "report.md").read_text()
    assert "| 00_first | ok |" in report
    assert "| 01_broken | **failed** at cell" in report
    assert "| 02_after | not run (run stopped after a failure) |" in report
    assert (run / "notebooks" / "01_broken.ipynb").is_file()
    assert not (run / "tables" / "02_seen.md").exists()


def test_unknown_param_and_notebook_are_one_line_errors(scratch):
    r = lab_cli("run", "--notebooks", str(scratch), "--only", "00", "--param", "no_such_knob=1")
    assert r.returncode == 1 and r.stderr.strip().startswith("error: --param no_such_knob: not a parameter")
    r = lab_cli("run", "--notebooks", str(scratch), "--only", "42")
    assert r.returncode == 1 and "error: --only 42: no such notebook (choose from 00, 01, 02)" in r.stderr
    r = lab_cli("run", "--notebooks", str(scratch), "--profile", "huge")
    assert r.returncode == 1 and "profile must be one of smoke, default, full" in r.stderr


def test_param_parsing():
    from servelab.lab.params import parse_param

    assert parse_param("concurrency_levels=[1, 8]") == ("concurrency_levels", [1, 8])
    assert parse_param("threshold=0.9") == ("threshold", 0.9)
    assert parse_param("place=node") == ("place", "node")
    with pytest.raises(ValueError):
        parse_param("no-equals-sign")


def test_only_selects_by_prefix():
    from pathlib import Path

    from servelab.lab.notebooks import select

    paths = [Path(n) for n in ("04_a.py", "05a_b.py", "05b_c.py", "06a_d.py")]
    assert [p.name for p in select(paths, ["05"])] == ["05a_b.py", "05b_c.py"]
    assert [p.name for p in select(paths, ["05b", "04"])] == ["04_a.py", "05b_c.py"]
    assert [p.name for p in select(paths, ["04,06a"])] == ["04_a.py", "06a_d.py"]


def test_node_place_points_at_the_node_ports(monkeypatch):
    from servelab.lab.runner import plan

    monkeypatch.setenv("SERVELAB_NODE_HOST", "10.0.0.5")
    p = plan(profile="smoke", place="node", only=["07"])
    assert p.values["triton_http_url"] == "http://10.0.0.5:8000"
    assert p.values["triton_grpc_url"] == "10.0.0.5:8001"
    assert p.values["triton_model"] == "openclip_vit_b32"
    assert not p.needs_stack


def test_port_policy():
    import socket

    from servelab.lab.stack import pick_port
    from servelab.netutil import free_port

    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen()
    busy = held.getsockname()[1]
    try:
        taken: set[int] = set()
        moved = pick_port(busy, "auto", taken)
        assert moved != busy and moved in taken
        with pytest.raises(RuntimeError, match=f"port {busy} on 127.0.0.1 is in use"):
            pick_port(busy, "configured", set())
        idle = free_port()
        assert pick_port(idle, "auto", set()) == idle
        assert pick_port(idle, "free", {idle}) != idle
    finally:
        held.close()


def test_node_place_without_servers_warns_then_fails_clearly(tmp_path, monkeypatch):
    from servelab.netutil import free_port

    for name in ("SERVICE", "TRITON_HTTP", "TRITON_GRPC", "TRITON_METRICS"):
        monkeypatch.setenv(f"SERVELAB_NODE_{name}_PORT", str(free_port()))  # nothing listens there
    r = lab_cli("run", "--place", "node", "--profile", "smoke", "--only", "07", "--results", str(tmp_path),
                "--run-id", "g", "--no-progress-bar")
    assert r.returncode == 1
    assert "warning: triton_http_url" in r.stderr and "does not answer" in r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("error: notebook 07_grpc_vs_http failed at cell")
    assert "requests failed" in last or "Connection" in last  # the first cell that talks to the absent Triton
    assert "| 07_grpc_vs_http | **failed**" in (tmp_path / "g" / "report.md").read_text()


def test_a_stack_that_cannot_start_is_one_line_and_in_the_report(tmp_path, monkeypatch):
    monkeypatch.setenv("SERVELAB_TRITONSERVER", str(tmp_path / "no-tritonserver"))
    r = lab_cli("run", "--profile", "smoke", "--only", "07", "--ports", "free", "--results", str(tmp_path),
                "--run-id", "s", "--no-progress-bar")
    assert r.returncode == 1
    assert r.stderr.strip().splitlines()[-1].startswith("error: tritonserver binary not found")
    assert "| 07_grpc_vs_http | not run (run stopped: tritonserver binary not found" in (tmp_path / "s" / "report.md").read_text()


def test_a_lab_run_stopped_with_sigterm_stops_its_stack_and_writes_its_report(tmp_path):
    """`kill` (or a CI timeout) ends a run like Ctrl-C: the service and tritonserver it started are stopped, so
    their ports are free for the next run, and the report says the run was interrupted."""
    import signal
    import subprocess
    import sys
    import time

    import httpx

    from servelab.config import CHECKOUT

    cmd = [sys.executable, "-m", "servelab.cli", "lab", "run", "--profile", "smoke", "--only", "01", "--run-id", "t",
           "--ports", "free", "--results", str(tmp_path), "--no-progress-bar"]
    proc = subprocess.Popen(cmd, cwd=CHECKOUT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if "stack ready" in line:
            break
    assert any("stack ready" in x for x in lines), "".join(lines)
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    rest, _ = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, "".join(lines) + rest
    endpoints = json.loads((tmp_path / "t" / "run.json").read_text())["endpoints"]
    for key in ("service_url", "triton_http_url"):
        with pytest.raises(httpx.TransportError):
            httpx.get(endpoints[key], timeout=2)
    assert "| 01_client_service_split | not run (run interrupted) |" in (tmp_path / "t" / "report.md").read_text()


def test_a_probe_within_the_gap_of_the_last_is_skipped(tmp_path, onnx_meta, monkeypatch):
    """Probes before each notebook and at the end, except within PROBE_GAP_S of the last one."""
    from types import SimpleNamespace

    from servelab.lab import runner

    plan = SimpleNamespace(place="local", values={"load": {"quick": False}}, run_id="g", out_dir=tmp_path / "g")
    said = []
    monkeypatch.setattr(runner, "PROBE_GAP_S", 0.0)
    probe = runner._drift_probe(plan, said.append)
    probe("a")
    probe("b")
    monkeypatch.setattr(runner, "PROBE_GAP_S", 3600.0)
    probe("c")
    notes = [json.loads(x)["note"] for x in (tmp_path / "g" / "records.jsonl").read_text().splitlines()]
    assert notes == ["before a", "before b"] and len(said) == 2
