"""Notebook 03's provider sentences come from the records: CUDA rows measured beside a missing TensorRT must not
be called CPU-only, and each provider not run carries the engine's own reason."""

from __future__ import annotations

from servelab.lab.provider_summary import ProviderSummary, cpu_nodes_note


def row(provider, engine="onnx", **fields):
    return {"engine": engine, "provider": provider, **fields}


NO_TRT = ("EngineError: no TensorRT in this image: ONNX Runtime's TensorRT provider needs TensorRT 10's runtime "
          "(libnvinfer.so.10), found neither as a Python package nor on the library path")


def test_cuda_measured_and_tensorrt_missing_is_not_called_cpu_only():
    recs = [row("cpu", throughput_img_s=30.0), row("cuda", throughput_img_s=2000.0),
            row("tensorrt", available=False, note=NO_TRT), row("tensorrt", engine="torch", available=False, note=NO_TRT)]
    s = ProviderSummary.of(recs)
    assert s.measured == ("cpu", "cuda") and not s.cpu_only
    assert s.not_run == {"tensorrt": "no TensorRT in this image"}
    assert s.sentence() == "Measured on cpu, cuda. Not run here: tensorrt (no TensorRT in this image)."
    assert "CPU-only" not in s.sentence() and "no GPU" not in s.sentence()


def test_cpu_alone_says_cpu_only_with_each_reason():
    recs = [row("cpu", throughput_img_s=30.0),
            row("cuda", available=False, note="EngineError: ONNX Runtime provider CUDAExecutionProvider is not "
                                               "available here (available: CPUExecutionProvider); install …"),
            row("tensorrt", available=False, note=NO_TRT)]
    s = ProviderSummary.of(recs)
    assert s.cpu_only
    assert s.sentence() == ("Measured on cpu — every number above is CPU-only. Not run here: cuda (ONNX Runtime "
                            "provider CUDAExecutionProvider is not available here (available: CPUExecutionProvider)); "
                            "tensorrt (no TensorRT in this image).")


def test_a_provider_measured_for_one_engine_is_not_listed_as_not_run():
    recs = [row("cuda", engine="torch", throughput_img_s=900.0), row("cuda", engine="onnx-int8", available=False,
                                                                     note="EngineError: out of memory")]
    assert ProviderSummary.of(recs).not_run == {}


def test_cpu_nodes_note_counts_the_nodes_placed_on_the_cpu():
    prof = {"n_cpu_fallback_nodes": 73, "nodes_by_provider": {"CUDAExecutionProvider": 400, "CPUExecutionProvider": 73}}
    assert cpu_nodes_note(prof) == "73 of 473 nodes ran on the CPU (ONNX Runtime's profile)"
    assert cpu_nodes_note({"n_cpu_fallback_nodes": 0, "nodes_by_provider": {"CUDAExecutionProvider": 400}}) == ""
