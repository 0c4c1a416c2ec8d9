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
