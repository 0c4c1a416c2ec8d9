"""NVIDIA's perf_analyzer (the binary from the tritonclient 2.51 wheel, fetched by `servelab triton
get-perf-analyzer`) against a real tritonserver: it runs with the libraries the nvidia-pytriton wheel carries,
and its figures agree with Triton's own statistics of the same requests."""

from __future__ import annotations

import csv as csvlib
from pathlib import Path

import pytest

from servelab.errors import CannotRun
from servelab.triton import perf_analyzer as pa
from servelab.triton.server_stats import stats_delta

pytestmark = pytest.mark.triton

ENCODER = "openclip_vit_b32_cpu"

CSV = """Concurrency,Inferences/Second,Client Send,Network+Server Send/Recv,Server Queue,Server Compute Input,Server Compute Infer,Server Compute Output,Client Recv,p50 latency,p90 latency,p95 latency,p99 latency
8,25.5,120,900,150000,1200,160000,300,40,310000,330000,340000,400000
"""


def test_parse_csv_reads_microseconds_as_ms():
    r = pa.parse_csv(CSV)
    assert (r.concurrency, r.throughput_img_s) == (8, 25.5)
    assert (r.latency_p50_ms, r.latency_p99_ms, r.server_queue_ms, r.server_compute_ms) == (310.0, 400.0, 150.0, 160.0)


def test_the_command_is_one_point_of_batch_1_requests():
    cmd = pa.command(pa.home() / "perf_analyzer", "127.0.0.1:8003", ENCODER, concurrency=8, requests=16)
    assert cmd[cmd.index("--concurrency-range") + 1] == "8" and cmd[cmd.index("-b") + 1] == "1"
    assert cmd[cmd.index("--measurement-request-count") + 1] == "16"


def test_perf_analyzer_measures_the_running_triton(triton, tmp_path):
    binary = pa.find()
    if binary is None:
        pytest.skip("no perf_analyzer here: `servelab triton get-perf-analyzer` fetches it")
    csv = tmp_path / "pa.csv"
    # its own stability windows, and where they never settle (beside the suite's other worker, ten windows were once
    # not stable enough for perf_analyzer to report at all) the one fallback every caller shares: a fixed count
    cmd = pa.command(binary, triton.http_address, ENCODER, concurrency=2, requests=6, stability_pct=20, max_trials=4,
                     csv=csv)
    with stats_delta(triton.http_url, ENCODER) as d:
        (r,) = pa.measure(cmd, csv, fallback_requests=12)
    assert r.concurrency == 2 and r.throughput_img_s > 0 and r.counted in (None, 12)
    assert 0 < r.latency_p50_ms <= r.latency_p99_ms
    assert "Request concurrency: 2" in r.output
    assert d.result.summary()["requests"] >= (12 if r.counted else 3 * 6)  # the measured requests reached the server


def test_a_fixed_count_replaces_every_measurement_option():
    cmd = pa.command(pa.home() / "perf_analyzer", "127.0.0.1:8003", ENCODER, concurrency=8, requests=16,
                     stability_pct=15, max_trials=3, csv=Path("pa.csv"))
    fixed = pa.fixed_count(cmd + ["-s", "20", "--max-trials=9", "--request-count", "5"], 48)
    assert pa.option(fixed, "--measurement-mode") == "count_windows"
    assert pa.option(fixed, "--measurement-request-count") == "48" and fixed.count("--measurement-request-count") == 1
    assert pa.option(fixed, "--stability-percentage") == "999" and pa.option(fixed, "--max-trials") == "3"
    assert not {"-s", "20", "--max-trials=9", "--request-count"} & set(fixed)
    assert fixed[fixed.index("-f") + 1] == "pa.csv" and fixed[fixed.index("--concurrency-range") + 1] == "8"


UNSETTLING = """#!/bin/sh
# stands in for perf_analyzer on a machine too busy for its windows to settle at concurrency 2: under a
# stability rule it writes concurrency 1's row and fails, as perf_analyzer does; with three windows taken as they
# come (-s 999) it reports every level of the range; the CSV goes where -f says
prev=""; for a; do [ "$prev" = "-f" ] && out="$a"; prev="$a"; done
head="Concurrency,Inferences/Second,Server Queue,Server Compute Infer,p50 latency,p99 latency"
case " $* " in
  *" --stability-percentage 999 "*) printf '%s\\n' "$head" "2,22.0,1000,40000,92000,120000" \\
                                      "1,11.0,500,45000,95000,110000" > "$out";;
  *) printf '%s\\n' "$head" "1,10.0,500,45000,95000,110000" > "$out"
     echo "Failed to obtain stable measurement within 3 measurement windows for concurrency 2."; exit 2;;
esac
"""


def test_windows_that_never_settle_fall_back_to_one_fixed_count_and_say_so(tmp_path):
    stand_in = tmp_path / "perf_analyzer"
    stand_in.write_text(UNSETTLING)
    stand_in.chmod(0o755)
    csv = tmp_path / "pa.csv"
    cmd = pa.command(stand_in, "127.0.0.1:1", ENCODER, concurrency=2, csv=csv)
    cmd[cmd.index("--concurrency-range") + 1] = "1:2:1"
    assert pa.concurrencies(cmd) == [1, 2]
    with pytest.raises(CannotRun, match="stable measurement"):
        pa.run(cmd, csv)
    rows = pa.measure(cmd, csv, fallback_requests=24)
    assert [(r.concurrency, r.counted) for r in rows] == [(1, 24), (2, 24)]  # every level, in order, said so
    assert rows[1].throughput_img_s == 22.0 and rows[1].latency_p50_ms == 92.0


def test_the_fixed_count_reads_a_rate_one_client_can_have(triton, tmp_path):
    """Little's law at concurrency 1: one client waiting for each answer sends 1 / (mean latency) requests a second.
    The fallback's three windows keep to it; `--request-count`, whose elapsed time perf_analyzer rounds up to
    whole seconds, read about 0.9 of it."""
    binary = pa.find()
    if binary is None:
        pytest.skip("no perf_analyzer here: `servelab triton get-perf-analyzer` fetches it")
    csv = tmp_path / "pa.csv"
    cmd = pa.fixed_count(pa.command(binary, triton.http_address, ENCODER, concurrency=1, csv=csv), 5)
    r = pa.run(cmd, csv)
    row = next(csvlib.DictReader(csv.read_text().splitlines()))
    mean_ms = sum(float(row[k]) for k in ("Client Send", "Network+Server Send/Recv", "Server Queue",
                                          "Server Compute Input", "Server Compute Infer", "Server Compute Output",
                                          "Client Recv")) / 1000
    assert r.throughput_img_s * mean_ms / 1000 == pytest.approx(1.0, rel=0.05)


def test_a_typed_line_splits_into_its_environment_and_the_command():
    env, argv = pa.parse_line(f"{pa.SHARE_ENV}=1 X=a\\ b build/perf_analyzer -m m -i grpc --concurrency-range=4 -u h:8004")
    assert env == {pa.SHARE_ENV: "1", "X": "a b"} and argv[0] == "build/perf_analyzer"
    assert pa.option(argv, "-i") == "grpc" and pa.option(argv, "--concurrency-range") == "4"
    assert pa.option(argv, "-b", default="1") == "1"
    with pytest.raises(ValueError, match="no command"):
        pa.parse_line(f"{pa.SHARE_ENV}=1")


def test_grpc_clients_share_one_connection_unless_each_gets_its_own_channel(triton, tmp_path):
    """TRITON_CLIENT_GRPC_CHANNEL_MAX_SHARE_COUNT decides how many connections perf_analyzer's gRPC clients hold:
    the lesson's shared-channel comparison rests on it, so the count is measured, not assumed."""
    binary = pa.find()
    if binary is None:
        pytest.skip("no perf_analyzer here: `servelab triton get-perf-analyzer` fetches it")
    port = int(triton.grpc_url.rsplit(":", 1)[1])
    held = {}
    for share in ("1", "64"):
        csv = tmp_path / f"pa-{share}.csv"
        cmd = pa.fixed_count(pa.command(binary, triton.grpc_url, ENCODER, concurrency=4, csv=csv), 16)
        cmd[cmd.index("-i") + 1] = "grpc"
        r = pa.run(cmd, csv, env={pa.SHARE_ENV: share}, count_port=port)
        assert r.concurrency == 4 and r.throughput_img_s > 0
        held[share] = r.connections
    assert held["64"] == 1 and held["1"] >= 4, held


def test_typed_lines_run_in_alternating_rounds_and_give_a_ratio_with_its_rounds(triton, tmp_path):
    from servelab.bench.results.records import Run
    from servelab.lab import perf_lines

    binary = pa.find()
    if binary is None:
        pytest.skip("no perf_analyzer here: `servelab triton get-perf-analyzer` fetches it")
    point = f"{binary} -m {ENCODER} --concurrency-range 2 --request-count 6"
    lines = {"http": f"{point} -i http -u {triton.http_address}",
             "grpc": f"{pa.SHARE_ENV}=1 {point} -i grpc -u {triton.grpc_url}"}
    run = Run(run_id="pa-lines", root=tmp_path)
    results = perf_lines.alternate(run, "t-pa", lines, rounds=2, out_dir=tmp_path / "logs")
    assert [r["params"]["round"] for r in results["grpc"]] == [0, 1]
    assert [r["protocol"] for r in results["grpc"]] == ["grpc", "grpc"] and results["http"][0]["server"] == "triton-http"
    assert all(r["params"]["connections"] >= 1 for runs in results.values() for r in runs)
    rec = perf_lines.ratio(run, "t-pa", results, "grpc", "http")
    assert rec["repeats"] == 2 and rec["ratio_min"] <= rec["ratio"] <= rec["ratio_max"]
    assert [r["kind"] for r in run.records].count("load") == 4
