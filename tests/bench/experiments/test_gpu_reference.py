"""The GPU reference run's parts that a CPU can run: the device-resident timer, the precision labels, the served
sweep's meters (a real uvicorn on loopback). The CUDA-only parts (graphs, nvJPEG, KIND_GPU) ran on an H100:
reference/nvidia-h100-80gb-hbm3/."""

from __future__ import annotations

import pytest

from servelab.bench.experiments import gpu_reference as gr
from servelab.bench.load import LoadOpts
from servelab.bench.results.records import Run


@pytest.fixture
def run(tmp_path):
    return Run("gpu-ref-test", root=tmp_path)


def test_device_resident_records_name_precision_variant_and_batch(run):
    recs = gr.device_resident(run, device="cpu", precisions=("fp32", "bf16"), batches=(1,), window_s=0.05,
                              windows=2)
    assert [(r["precision"], r["variant"], r["batch"]) for r in recs] == [("fp32", "eager", 1), ("bf16", "eager", 1)]
    for r in recs:
        assert r["kind"] == "raw" and r["provider"] == "cpu" and r["throughput_img_s"] > 0
        assert r["throughput_min_img_s"] <= r["throughput_img_s"] <= r["throughput_max_img_s"]
        # the time per batch at the median rate; the record's rate is rounded to 0.1 img/s (2 % at 3 img/s on a CPU)
        assert r["latency_p50_ms"] == pytest.approx(1000 * r["batch"] / r["throughput_img_s"],
                                                    rel=0.06 / r["throughput_img_s"] + 0.001)
        assert "nothing is copied" in r["note"]
    fastest = max(recs, key=lambda r: r["throughput_img_s"])
    assert gr.best_precision(recs) == fastest["precision"]
    assert gr.best_precision([]) == "fp16"


def test_half_precision_is_compared_with_fp32_not_with_itself(run, monkeypatch):
    """With SERVELAB_PRECISION=bf16 the host-fed engine runs bf16, and its cosine is taken against fp32."""
    from servelab.bench import experiments as ex

    monkeypatch.setenv("SERVELAB_ENGINE", "torch")
    monkeypatch.setenv("SERVELAB_PRECISION", "bf16")
    (rec,) = ex.raw_engines(run, engines=("torch",), providers=("cpu",), batches=(1,), opts=LoadOpts.smoke())
    assert rec["precision"] == "bf16"
    assert 0.999 <= rec["cosine_vs_torch_fp32"] < 0.999999  # bf16 against itself would be 1.0


def test_precision_parity_measures_fp16_and_bf16_against_fp32(run):
    recs = gr.precision_parity(run, device="cpu", n=4)
    assert [r["precision"] for r in recs] == ["fp16", "bf16"]
    for r in recs:
        assert 0.999 <= r["value"] <= 1.0 and r["met"] is True and r["value_mean"] >= r["value"]


def test_served_sweep_records_what_the_server_the_client_and_the_gpu_used(run, monkeypatch):
    """On a machine without NVML the GPU fields are null, never made up; the CPU fields are measured."""
    monkeypatch.setenv("SERVELAB_ENGINE", "onnx")
    recs = gr.served_sweep(run, "fastapi", engine="onnx", payloads=("tensor",), concurrencies=(1, 2),
                           opts=LoadOpts.smoke())
    assert [r["concurrency"] for r in recs] == [1, 2]
    for r in recs:
        assert r["experiment"] == "gpu-served" and r["throughput_img_s"] > 0 and r["errors"] == 0
        assert r["server_cpu_pct"] is not None and r["loadgen_cpu_pct"] is not None
        assert "gpu_util_pct" in r and "gpu_mem_used_mb" in r
    assert (run.dir / "fastapi-gpu.log").exists()


def test_an_unknown_stage_is_one_clear_error(run):
    with pytest.raises(ValueError, match="stage must be one of raw, service, triton"):
        gr.run_stage(run, "warp-speed")


def test_the_jpeg_ceiling_decodes_into_the_forward_pass_on_a_cpu(run):
    """The lease's ceiling step, eager on a CPU (no CUDA graphs here): JPEG bytes in, one record per batch."""
    from servelab.bench.load.inputs import sample_jpegs
    from servelab.model.gpu_decode import preprocess_jpegs

    try:
        preprocess_jpegs(list(sample_jpegs(1)), device="cpu")
    except RuntimeError as exc:  # a CPU torch beside a CUDA torchvision build: no image ops (see ENVIRONMENT)
        pytest.skip(f"torchvision cannot decode JPEG here: {exc}"[:200])
    (rec,) = gr.jpeg_ceiling(run, "fp32", device="cpu", batches=(2,), window_s=0.05, windows=2)
    assert (rec["experiment"], rec["payload"], rec["batch"], rec["variant"]) == ("gpu-ceiling", "jpeg", 2, "eager")
    assert rec["throughput_img_s"] > 0 and "one batched decode on cpu" in rec["note"]


def test_top_frames_ranks_py_spy_stacks_by_own_samples():
    raw = "main;serve;decode 30\nmain;serve;run 50\nmain;wait 20\nnot a stack line\n"
    assert gr.top_frames(raw, n=2) == [{"frame": "run", "samples": 50, "share": 0.5},
                                       {"frame": "decode", "samples": 30, "share": 0.3}]
    assert gr.top_frames("") == []


@pytest.mark.triton
def test_perf_analyzer_drives_the_embedded_triton_point_by_point(run, onnx_meta):
    """The lease's perf_analyzer step on a CPU: the embedded tritonserver's encoder, one record per concurrency."""
    from servelab.triton import perf_analyzer as pa

    if pa.find() is None:
        pytest.skip("no perf_analyzer here: `servelab triton get-perf-analyzer` fetches it")
    (rec,) = gr.perf_analyzer_sweep(run, engine="onnx", device="cpu", concurrencies=(1,), request_count=4)
    assert rec["params"]["client"] == "perf_analyzer" and rec["concurrency"] == 1 and rec["throughput_img_s"] > 0
    assert rec["params"]["counted"] == 4 and rec["quick"]  # a fixed count: said in the record
    assert 0 < rec["latency_p50_ms"] <= rec["latency_p99_ms"]


def test_the_decode_sweep_labels_each_configuration_and_says_what_it_did_not_begin(run, tmp_path):
    """The lease's decode comparison on a CPU (the emulated accelerator, so no model loads; labelled emulated): the
    decode pool with 1 and 2 frontend processes, each record naming its setting, the place in force and its
    workers; a configuration the budget leaves no time for is recorded as not begun."""
    env = {"SERVELAB_DEVICE_PROFILE": "flat", "SERVELAB_DEVICE_DIR": str(tmp_path / "devices")}
    left = iter([1e9, 1e9, 0.0])
    recs = gr.decode_sweep(run, engine="emulated", env=env, decodes=("cpu",), workers=(1, 2, 4), concurrencies=(2,),
                           opts=LoadOpts.smoke(), time_left=lambda: next(left))
    assert [(r["decode"], r["workers"], r["kind"]) for r in recs] == [("cpu", 1, "load"), ("cpu", 2, "load"),
                                                                       ("cpu", 4, "unavailable")]
    for r in recs[:2]:
        assert r["experiment"] == "gpu-served-decode" and r["payload"] == "jpeg" and r["errors"] == 0
        assert r["decode_in_force"] == "cpu" and r["throughput_img_s"] > 0 and r["params"]["served_by"]
        assert "emulated" in r["params"]["device"]
    assert "not begun" in recs[2]["note"]
