"""NVIDIA's perf_analyzer (the binary from the tritonclient 2.51 wheel, fetched by `servelab triton
get-perf-analyzer`) against a real tritonserver: it runs with the libraries the nvidia-pytriton wheel carries,
and its figures agree with Triton's own statistics of the same requests."""

from __future__ import annotations

import pytest

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
    # one measurement of a fixed number of requests, no stability rule: this checks that the tool runs and that its
    # output is read right, not that the machine is quiet (stable windows are a benchmark's business; beside the
    # suite's other worker, ten windows were once not stable enough for perf_analyzer to report at all)
    cmd = pa.command(binary, triton.http_address, ENCODER, concurrency=2, request_count=12, csv=csv)
    assert "--stability-percentage" not in cmd
    with stats_delta(triton.http_url, ENCODER) as d:
        r = pa.run(cmd, csv)
    assert r.concurrency == 2 and r.throughput_img_s > 0
    assert 0 < r.latency_p50_ms <= r.latency_p99_ms
    assert "Request concurrency: 2" in r.output
    assert d.result.summary()["requests"] >= 12  # the twelve measured requests reached the server


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
        cmd = pa.command(binary, triton.grpc_url, ENCODER, concurrency=4, request_count=16, csv=csv)
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
