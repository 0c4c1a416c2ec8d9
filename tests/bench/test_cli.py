"""`servelab bench …` as a user runs it: real subprocesses, results into a temp folder."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from servelab.bench.results.records import Run

SERVELAB = [sys.executable, "-c", "from servelab.cli import main; main()"]


def _cli(args, results: Path, timeout=300):
    env = {**os.environ, "SERVELAB_RESULTS": str(results)}
    return subprocess.run(SERVELAB + args, capture_output=True, text=True, env=env, timeout=timeout)


def _synthetic(root, name, thr):
    run = Run(run_id=name, root=root, weights="random-init (seed 0)")
    run.record("service", kind="load", server="fastapi", engine="onnx", batch=1, concurrency=16,
               throughput_img_s=thr, latency_p50_ms=500.0, latency_p99_ms=700.0, spread=0.05)


def test_compare_prints_points_and_whether_b_reproduces_a(tmp_path):
    _synthetic(tmp_path, "a", 28.0)
    _synthetic(tmp_path, "b", 35.0)
    _synthetic(tmp_path, "c", 28.5)
    r = _cli(["bench", "compare", "a", "b"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert re.search(r"\| throughput_img_s A +\|", r.stdout) and "differs: throughput_img_s +25.0 % (noise 5.0 %)" in r.stdout
    assert "0 of 1 points within noise (0 %" in r.stdout and "NOT reproduced" in r.stdout
    assert _cli(["bench", "compare", "a", "b", "--check"], tmp_path).returncode == 1
    r = _cli(["bench", "compare", "a", "c", "--check"], tmp_path)
    assert r.returncode == 0 and "1 of 1 points within noise (100 %" in r.stdout and "reproduced" in r.stdout


def test_compare_unknown_run_is_one_line_error(tmp_path):
    r = _cli(["bench", "compare", "nope", "nada"], tmp_path)
    assert r.returncode == 1
    assert r.stderr.strip().startswith("error: no run 'nope'") and len(r.stderr.strip().splitlines()) == 1


def test_engines_quick_records_unavailable_provider(tmp_path, onnx_meta):
    r = _cli(["bench", "engines", "--quick", "--engines", "onnx-int8", "--providers", "cpu,cuda", "--batches", "1",
              "--run-id", "eng"], tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    recs = [json.loads(x) for x in (tmp_path / "eng" / "records.jsonl").read_text().splitlines()]
    cuda = [x for x in recs if x["provider"] == "cuda"]
    cpu = [x for x in recs if x["provider"] == "cpu"]
    if cuda and cuda[0]["kind"] == "unavailable":  # a CPU machine: says so, never a silent CPU fallback
        assert cuda[0]["available"] is False and "CUDAExecutionProvider" in cuda[0]["note"]
        assert "not available: " in r.stdout
    assert cpu and cpu[0]["kind"] == "raw" and cpu[0]["throughput_img_s"] > 0
    assert (tmp_path / "eng" / "tables" / "engines.md").exists()
    assert (tmp_path / "eng" / "environment.json").exists()


def test_unknown_server_is_one_line_error(tmp_path):
    r = _cli(["bench", "concurrency-sweep", "--quick", "--server", "nginx", "--run-id", "x"], tmp_path)
    assert r.returncode == 1
    assert r.stderr.strip().startswith("error: server must be one of fastapi, litserve, triton-http")
    assert len(r.stderr.strip().splitlines()) == 1


def test_batch_sweep_in_process_prints_ranges_and_smoke_warning(tmp_path, onnx_meta):
    r = _cli(["bench", "batch-sweep", "--quick", "--batches", "1,2", "--run-id", "bs"], tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "throughput_min_img_s" in r.stdout and "stable" in r.stdout
    assert "quick run: these numbers check that things run; they are not results" in r.stdout
    recs = [json.loads(x) for x in (tmp_path / "bs" / "records.jsonl").read_text().splitlines()]
    assert [(x["server"], x["batch"]) for x in recs] == [("in-process", 1), ("in-process", 2)]
