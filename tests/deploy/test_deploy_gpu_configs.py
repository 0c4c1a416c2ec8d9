"""GPU-node Triton configs (servelab/triton/staging/gpu, by the Triton engineer) vs what the containers provide, and a
real `stage("gpu")` into a temp folder as the node's prepare step runs it."""

from __future__ import annotations

import inspect
import re

from tests.deploy.conftest import REPO_ROOT

EXPECTED_GPU_MODELS = {"openclip_vit_b32", "openclip_vit_b32_trt", "preprocess_jpeg", "openclip_vit_b32_jpeg"}


def test_gpu_model_set_is_the_one_the_stacks_serve(gpu_models):
    assert EXPECTED_GPU_MODELS <= gpu_models


def test_triton_image_matches_stack_and_sdk_tags():
    dockerfile = (REPO_ROOT / "docker" / "Dockerfile.triton").read_text()
    tag = re.search(r"^FROM nvcr.io/nvidia/tritonserver:(\S+)-py3$", dockerfile, re.M).group(1)
    sdk = (REPO_ROOT / "docker" / "compose.perf-analyzer.yaml").read_text()
    assert f"nvcr.io/nvidia/tritonserver:{tag}-py3-sdk" in sdk, "SDK and server should be the same release"


def test_prepare_step_uses_the_stage_api_it_calls():
    from servelab.triton.repository import stage

    params = inspect.signature(stage).parameters
    for name in ("flavour", "instances", "gpus", "max_batch", "trt_cache", "servelab_path", "settings", "log_fn"):
        assert name in params


def _trt_params(cfg) -> dict:
    return {p: v for a in cfg.optimization.execution_accelerators.gpu_execution_accelerator if a.name == "tensorrt"
            for p, v in a.parameters.items()}


def test_staged_gpu_repository(tmp_path, onnx_meta, gpu_trt_cache_path):
    """What compose.00-prepare.yaml writes with SERVELAB_INSTANCES=2, parsed back into Triton's ModelConfig."""
    import hashlib

    from servelab.triton.repository import parse_config, stage, warmup_batches

    info = stage("gpu", out=tmp_path / "models", instances=2, trt_cache="/trt_cache",
                 servelab_path="/opt/servelab")
    assert EXPECTED_GPU_MODELS <= set(info["models"])
    repo = tmp_path / "models"
    for enc in ("openclip_vit_b32", "openclip_vit_b32_trt"):
        cfg = parse_config(repo / enc / "config.pbtxt")
        # no GPU ids: Triton places `count` instances on every GPU the container sees, i.e. on exactly the
        # devices the stack reserves (renumbered from 0 inside it), so ids cannot disagree with the reservation
        assert [(g.count, list(g.gpus)) for g in cfg.instance_group] == [(2, [])]
        assert (repo / enc / "1" / "model.onnx").stat().st_size > 1_000_000
        assert cfg.input[0].name == "pixel_values" and cfg.output[0].name == "embedding"
        # HEURISTIC cuDNN search: the backend's default (EXHAUSTIVE) searches per new batch shape, on live traffic
        assert cfg.parameters["cudnn_conv_algo_search"].string_value == "1"
    cuda = parse_config(repo / "openclip_vit_b32" / "config.pbtxt")
    assert [w.batch_size for w in cuda.model_warmup] == warmup_batches(cuda.max_batch_size) == [1, 2, 4, 8, 16, 32, 64]
    pre = parse_config(repo / "preprocess_jpeg" / "config.pbtxt")
    assert pre.parameters["servelab_path"].string_value == "/opt/servelab"
    trt = parse_config(repo / "openclip_vit_b32_trt" / "config.pbtxt")
    acc = _trt_params(trt)
    # engines keyed by the exported model: other weights -> another file prefix -> a fresh engine, never the old
    # one; and they sit in the mounted volume itself, so instances loaded in parallel create no folder (a race)
    with open(repo / "openclip_vit_b32_trt" / "1" / "model.onnx", "rb") as f:
        sha = hashlib.file_digest(f, "sha256").hexdigest()
    assert acc["trt_engine_cache_path"] == acc["trt_timing_cache_path"] == gpu_trt_cache_path == "/trt_cache"
    assert acc["trt_engine_cache_prefix"] == f"openclip_{sha[:16]}"
    assert acc["trt_force_sequential_engine_build"] == "1"  # instances sharing the cache build one at a time
    for model in info["models"]:  # what Triton needs to find in each version folder
        cfg = parse_config(repo / model / "config.pbtxt")
        if cfg.backend == "python":
            assert (repo / model / "1" / "model.py").is_file(), model
        elif cfg.platform == "onnxruntime_onnx":
            assert (repo / model / "1" / "model.onnx").is_file(), model
        else:
            assert cfg.platform == "ensemble" and (repo / model / "1").is_dir(), model
    ens = parse_config(repo / "openclip_vit_b32_jpeg" / "config.pbtxt")
    assert {s.model_name for s in ens.ensemble_scheduling.step} == {"preprocess_jpeg", "openclip_vit_b32"}


def test_explicit_gpu_list_is_kept(tmp_path, onnx_meta):
    """A bare tritonserver that sees every GPU (scripts/VASTAI.md) may still name GPUs explicitly."""
    from servelab.triton.repository import parse_config, stage

    stage("gpu", out=tmp_path / "models", gpus=[0, 1])
    cfg = parse_config(tmp_path / "models" / "openclip_vit_b32" / "config.pbtxt")
    assert [(g.count, list(g.gpus)) for g in cfg.instance_group] == [(1, [0, 1])]


def test_restage_replaces_models_inside_the_mounted_folder(tmp_path, onnx_meta):
    """A running Triton bind-mounts models/: re-staging must change what is inside that very folder, not rename
    or delete the folder (the container would keep the deleted one)."""
    import os

    from servelab.triton.repository import parse_config, stage

    out = tmp_path / "models"
    stage("gpu", out=out, instances=1)
    (out / "stale_model").mkdir()
    (out / "stale_model" / "config.pbtxt").write_text('name: "stale_model"\n')
    fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY)  # what the container holds: this directory, not its name
    try:
        inode = os.fstat(fd).st_ino
        stage("gpu", out=out, instances=3)
        seen_through_mount = set(os.listdir(fd))
        assert os.stat(out).st_ino == inode
        assert EXPECTED_GPU_MODELS <= seen_through_mount and "stale_model" not in seen_through_mount
        cfg = parse_config(f"/proc/self/fd/{fd}/openclip_vit_b32/config.pbtxt")
        assert cfg.instance_group[0].count == 3
    finally:
        os.close(fd)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["models"]  # no temp or trash folders left
