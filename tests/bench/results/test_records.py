"""Record schema, run folders and the environment fingerprint."""

import json

import jsonschema
import pytest

from servelab.bench.results.records import RECORD_SCHEMA, Run, load_records, make_record, validate_record


def test_a_full_record_validates_and_nulls_are_allowed():
    rec = make_record("concurrency-sweep", "r1", server="fastapi", weights="random-init (seed 0)",
                      backend="fastapi", engine="onnx", protocol="http", payload="tensor", batch=1, concurrency=16,
                      latency_p50_ms=12.5, latency_p95_ms=20.0, latency_p99_ms=30.0, throughput_img_s=28.0,
                      requests=100, errors=0, repeats=3, stable=True, spread=0.04)
    validate_record(rec)
    validate_record(make_record("engines", "r1", kind="unavailable", server="in-process", available=False,
                                note="CUDAExecutionProvider not available"))
    assert set(RECORD_SCHEMA["required"]) <= set(rec)


@pytest.mark.parametrize("bad", [
    {"latency_p50_ms": "12 ms"},          # units belong in the name, values are numbers
    {"errors": -1},
    {"kind": "guess"},
    {"concurrency": 0},
    {"memory": {"rss_mb": 1.0}},          # memory must say rss, of what, and GPU (null when none)
])
def test_schema_rejects_bad_records(bad):
    rec = make_record("x", "r1", server="t")
    rec.update(bad)
    with pytest.raises(jsonschema.ValidationError):
        validate_record(rec)


def test_missing_field_is_rejected():
    rec = make_record("x", "r1", server="t")
    del rec["throughput_img_s"]
    with pytest.raises(jsonschema.ValidationError):
        validate_record(rec)


def test_run_writes_jsonl_and_fingerprint(tmp_path):
    run = Run(run_id="unit", root=tmp_path, weights="random-init (seed 0)")
    run.record("engines", kind="raw", server="in-process", throughput_img_s=10.0, batch=1, concurrency=1)
    run.record("engines", kind="raw", server="in-process", throughput_img_s=20.0, batch=16, concurrency=1)
    lines = (tmp_path / "unit" / "records.jsonl").read_text().splitlines()
    assert [json.loads(x)["throughput_img_s"] for x in lines] == [10.0, 20.0]
    env = json.loads((tmp_path / "unit" / "environment.json").read_text())
    for key in ("cpu_model", "cpu_logical", "gpus", "versions", "git_sha", "weights"):
        assert key in env
    assert env["weights"] == "random-init (seed 0)" and env["versions"]["numpy"]
    assert not list((tmp_path / "unit").glob("*.tmp"))  # written via temp + rename
    # reopening appends to the same run
    again = Run(run_id="unit", root=tmp_path)
    again.record("engines", kind="raw", server="in-process", throughput_img_s=30.0)
    assert len(load_records(tmp_path / "unit")) == 3
    assert all(r["weights"] == "random-init (seed 0)" for r in load_records(tmp_path / "unit"))


def test_invalid_record_is_not_written(tmp_path):
    run = Run(run_id="bad", root=tmp_path, weights="w")
    with pytest.raises(jsonschema.ValidationError):
        run.record("x", server="t", batch=0)
    assert not (tmp_path / "bad" / "records.jsonl").exists()


def test_schema_1_records_load_with_todays_field_names(tmp_path):
    old = make_record("concurrency-sweep", "old", kind="load", weights="w", batch=1, concurrency=4)
    old.update(schema_version=1, target=old.pop("server"), server={"avg_batch": 2.0})
    del old["server_stats"]
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "records.jsonl").write_text(json.dumps(old | {"target": "fastapi"}) + "\n")
    [rec] = load_records(tmp_path / "old")
    assert rec["server"] == "fastapi" and rec["server_stats"] == {"avg_batch": 2.0} and "target" not in rec
    validate_record(rec)


def test_a_record_measured_in_this_process_names_this_machine(tmp_path):
    """In-process and client-side rows are served by the machine the notebook runs on; rows say so even when the
    code that made them did not (at place=node they sit beside rows the node served)."""
    from servelab.bench.results.records import Run
    from servelab.bench.servers import this_machine

    run = Run("r", root=tmp_path, weights="w")
    local = run.record("engines", server="in-process", engine="onnx", throughput_img_s=1.0)
    client = run.record("05a-serialisation", server="client", throughput_img_s=1.0)
    remote = run.record("x", server="triton-http", throughput_img_s=1.0)
    assert local["params"]["served_by"] == client["params"]["served_by"] == this_machine()
    assert "served_by" not in remote["params"]  # a server's machine comes from its handle, never guessed
