"""Checks the lab runs on rendered deployment configs where the hardware to run them is missing (05b).

Each check reads the config through Triton's own ModelConfig protobuf (servelab.triton.repository.parse_config),
so a row that passes means Triton would see that value, not that a string appears in a file.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd


def _shape_batch(value: str) -> int | None:
    """'pixel_values:64x3x224x224' -> 64."""
    try:
        return int(value.split(":", 1)[1].split("x", 1)[0])
    except (IndexError, ValueError):
        return None


def check_trt_config(path: str | Path) -> pd.DataFrame:
    """One row per property a TensorRT-EP deployment needs: what it is, the value found, ok, why it matters."""
    from servelab.triton.repository import parse_config

    cfg = parse_config(Path(path))
    accs = [a for a in cfg.optimization.execution_accelerators.gpu_execution_accelerator if a.name == "tensorrt"]
    p = dict(accs[0].parameters) if accs else {}
    mb = cfg.max_batch_size
    warm = sorted(w.batch_size for w in cfg.model_warmup)
    kinds = {g.kind for g in cfg.instance_group}
    from tritonclient.grpc import model_config_pb2 as mc

    rows = [
        ("TensorRT accelerator configured", "tensorrt" if accs else "none", bool(accs),
         "without it ONNX Runtime runs the CUDA EP only"),
        ("fp16 precision", p.get("precision_mode", "-"), p.get("precision_mode") == "FP16",
         "fp16 tensor cores: the main TensorRT speed-up"),
        ("engine cache enabled", p.get("trt_engine_cache_enable", "-"), p.get("trt_engine_cache_enable") == "1",
         "otherwise every start rebuilds the engine (minutes)"),
        ("engine cache on a mounted path", p.get("trt_engine_cache_path", "-"),
         p.get("trt_engine_cache_path", "").startswith("/"), "the cache must outlive the container"),
        ("timing cache enabled", p.get("trt_timing_cache_enable", "-"), p.get("trt_timing_cache_enable") == "1",
         "speeds up builds of new shapes/engines"),
        ("profile min batch = 1", p.get("trt_profile_min_shapes", "-"), _shape_batch(p.get("trt_profile_min_shapes", "")) == 1,
         "batch-1 requests must fit the profile"),
        ("profile max batch = max_batch_size", p.get("trt_profile_max_shapes", "-"),
         _shape_batch(p.get("trt_profile_max_shapes", "")) == mb,
         f"the dynamic batcher can form batches up to {mb}"),
        ("profile opt batch within [1, max]", p.get("trt_profile_opt_shapes", "-"),
         1 <= (_shape_batch(p.get("trt_profile_opt_shapes", "")) or 0) <= mb, "the shape TensorRT tunes for"),
        ("dynamic batching on", "yes" if cfg.HasField("dynamic_batching") else "no", cfg.HasField("dynamic_batching"),
         "batches concurrent requests"),
        ("warm-up covers 1 and max batch", ", ".join(map(str, warm)) or "-", bool(warm) and warm[0] == 1 and warm[-1] == mb,
         "the engine is built at load, not on the first request"),
        ("instances on GPU", ", ".join(mc.ModelInstanceGroup.Kind.Name(k) for k in kinds) or "-",
         kinds == {mc.ModelInstanceGroup.KIND_GPU}, "TensorRT runs only on a GPU instance"),
        ("no cuda graphs option (ignored by ORT)", "absent" if not cfg.optimization.HasField("cuda") else "present",
         not cfg.optimization.HasField("cuda"), "`optimization { cuda { graphs } }` does nothing for onnxruntime"),
    ]
    return pd.DataFrame(rows, columns=["setting", "value", "ok", "why it matters"])
