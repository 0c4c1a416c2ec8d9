"""`stage("cpu", device="cuda")`: the embedded server's python-backend encoder on KIND_GPU instances running
onnxruntime's CUDA provider (a GPU machine without NVIDIA's container). Served for real in tests/gpu."""

from __future__ import annotations

import pytest
from tritonclient.grpc import model_config_pb2 as mc

from servelab.triton.models import CPU_ENCODER, PREPROCESS
from servelab.triton.repository import parse_config, stage

pytestmark = pytest.mark.triton


def test_cuda_device_puts_the_encoder_on_gpu_instances(onnx_meta, settings, tmp_path):
    info = stage("cpu", tmp_path / "models", instances=2, device="cuda", settings=settings)
    assert info["device"] == "cuda"
    cfg = parse_config(tmp_path / "models" / CPU_ENCODER / "config.pbtxt")
    [group] = cfg.instance_group
    assert group.kind == mc.ModelInstanceGroup.KIND_GPU and group.count == 2 and not group.gpus
    assert cfg.parameters["provider"].string_value == "cuda"
    [pre] = parse_config(tmp_path / "models" / PREPROCESS / "config.pbtxt").instance_group or [None]
    assert pre is None or pre.kind != mc.ModelInstanceGroup.KIND_GPU  # decoding stays on the CPU


def test_default_device_is_the_cpu(onnx_meta, settings, tmp_path):
    stage("cpu", tmp_path / "models", settings=settings)
    cfg = parse_config(tmp_path / "models" / CPU_ENCODER / "config.pbtxt")
    assert cfg.instance_group[0].kind == mc.ModelInstanceGroup.KIND_CPU
    assert cfg.parameters["provider"].string_value == "cpu"


def test_device_is_checked(settings, tmp_path):
    with pytest.raises(ValueError, match="device must be one of cpu, cuda"):
        stage("cpu", tmp_path / "m", device="tpu", settings=settings)
    with pytest.raises(ValueError, match="on the GPU already"):
        stage("gpu", tmp_path / "m", device="cuda", settings=settings)
    assert not (tmp_path / "m").exists()
