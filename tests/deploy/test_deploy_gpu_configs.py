"""GPU-node Triton configs (models_staging/gpu, by the Triton engineer) vs what the containers provide, and a
real `stage(target="gpu")` into a temp folder as the node's prepare step runs it."""

from __future__ import annotations

import inspect
import re

import pytest

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
    for name in ("target", "instances", "gpus", "max_batch", "trt_cache", "servelab_path", "settings", "log_fn"):
        assert name in params


def test_staged_gpu_repository_for_two_gpus(tmp_path, onnx_meta, gpu_trt_cache_path):
    """What compose.00-prepare.yaml writes for SERVELAB_GPUS=0,1 SERVELAB_INSTANCES=2, parsed back."""
    from servelab.triton.repository import parse_config, stage

    info = stage(target="gpu", out=tmp_path / "models", instances=2, gpus=[0, 1], trt_cache="/trt_cache",
                 servelab_path="/opt/servelab")
    assert EXPECTED_GPU_MODELS <= set(info["models"])
    repo = tmp_path / "models"
    for enc in ("openclip_vit_b32", "openclip_vit_b32_trt"):
        cfg = parse_config(repo / enc / "config.pbtxt")
        assert [(g.count, list(g.gpus)) for g in cfg.instance_group] == [(2, [0, 1])]
        assert (repo / enc / "1" / "model.onnx").stat().st_size > 1_000_000
        assert cfg.input[0].name == "pixel_values" and cfg.output[0].name == "embedding"
    pre = parse_config(repo / "preprocess_jpeg" / "config.pbtxt")
    assert pre.parameters["servelab_path"].string_value == "/opt/servelab"
    trt = parse_config(repo / "openclip_vit_b32_trt" / "config.pbtxt")
    acc = {p: v for a in trt.optimization.execution_accelerators.gpu_execution_accelerator if a.name == "tensorrt"
           for p, v in a.parameters.items()}
    assert acc["trt_engine_cache_path"] == gpu_trt_cache_path == "/trt_cache"
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
