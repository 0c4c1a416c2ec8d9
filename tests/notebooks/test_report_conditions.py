"""The lab report says how the client reached the servers: links and their shaping, pinning, load-generator CPU."""

import json

from servelab.lab.run_report import build_markdown


def test_report_names_links_pinning_and_loadgen_cpu(tmp_path):
    relay = "user-space relay (rate + delay, no loss)"
    recs = [{"kind": "load", "params": {"link": "wan-100mbit-20ms", "link_shaping": relay}, "loadgen_cpu_pct": 12.0,
             "server_cpu_pct": 150.0, "cpu_pinning": "client on core(s) 0, server on 1"},
            {"kind": "load", "params": {"link": "loopback", "link_shaping": "none (loopback)"}, "loadgen_cpu_pct": 30.0},
            {"kind": "raw", "params": {}, "loadgen_cpu_pct": 99.0}]  # in-process: not a client-server point
    (tmp_path / "records.jsonl").write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    md = build_markdown(tmp_path)
    assert f"- link `wan-100mbit-20ms`: {relay}" in md and "- link `loopback`: none (loopback)" in md
    assert "- CPU pinning: client on core(s) 0, server on 1" in md
    assert "- CPU of the load generator threads: 12–30 % of one core across 2 points" in md
    assert "server process: 150–150 %" in md


def test_report_without_records_has_no_conditions_section(tmp_path):
    assert "How the client reached the servers" not in build_markdown(tmp_path)


def test_run_json_pinning_wins_and_pin_cores_pins_the_stack(tmp_path):
    import os
    import subprocess
    import sys

    from servelab.lab.runner import _pinned

    (tmp_path / "run.json").write_text(json.dumps({"cpu_pinning": "client on core(s) 0, server on 1"}))
    (tmp_path / "records.jsonl").write_text(json.dumps({"kind": "load", "params": {}}) + "\n")
    assert "- CPU pinning: client on core(s) 0, server on 1" in build_markdown(tmp_path)

    said = []
    with _pinned({}, False, said.append) as how:
        assert how.startswith("not pinned") and not said
    server = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(20)"])
    try:
        mine = os.sched_getaffinity(0)
        with _pinned({"service_pid": server.pid, "triton_pid": 0}, True, said.append) as how:
            if len(mine) >= 2:
                assert how.startswith("client on core(s)") and os.sched_getaffinity(server.pid) != mine
                assert not os.sched_getaffinity(0) & os.sched_getaffinity(server.pid)
            assert said == [f"CPU pinning: {how}"]
        assert os.sched_getaffinity(0) == mine
    finally:
        server.kill()
        server.wait()


def test_each_notebook_time_stands_beside_its_budget_and_an_overrun_is_marked(tmp_path):
    from servelab.lab import params
    from servelab.lab.runner import _against

    assert params.budget_s("default", "04") and params.budget_s("smoke", "04") and params.budget_s("full", "04") is None
    assert set(params.BUDGETS_S["default"]) == set(params.BUDGETS_S["smoke"]) == {
        "00", "01", "02", "03", "04", "05a", "05b", "06a", "06b", "06c", "07", "08", "09"}
    run = {"run_id": "r", "profile": "default", "started": "2026-11-25T10:00:00", "finished": "2026-11-25T10:07:30",
           "notebooks": [{"id": "01", "name": "01_a", "status": "ok", "seconds": 100.0, "budget_s": 150},
                         {"id": "04", "name": "04_b", "status": "ok", "seconds": 340.0, "budget_s": 330}]}
    (tmp_path / "run.json").write_text(json.dumps(run))
    md = build_markdown(tmp_path)
    assert "| 01_a | ok | 100.0 | 150 |" in md and "| 04_b | ok | 340.0 | 330 **over** |" in md
    assert "Time: 7.3 min in the notebooks (budget 8 min); 7.5 min from start to finish." in md
    assert _against(run["notebooks"][0]) == ", budget 150 s"
    assert _against(run["notebooks"][1]) == ", OVER its budget of 330 s"
    assert _against({"seconds": 5.0, "budget_s": None}) == ""
