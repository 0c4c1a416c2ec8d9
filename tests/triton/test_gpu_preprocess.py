"""The GPU staging's JPEG preprocessing model (batched nvJPEG on the instance's GPU, output left there), checked on
a CPU: its staged config says KIND_GPU and the CPU staging's stays on the CPU; the model file imports; and its
batch assembly runs on the CPU with PIL standing in for nvJPEG (torchvision's decoder, the only part that needs
the GPU, is replaced and named so; tests/unit/test_engine_parts.py says why). A real tritonserver on a GPU serves
it in the lease (scripts/gpu_reference.sh)."""

from __future__ import annotations

import importlib.util
import io
import sys
import types
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from tritonclient.grpc import model_config_pb2 as mc

from servelab.model import gpu_decode, preprocess
from servelab.triton.repository import STAGING, parse_config, stage
from tests.unit.test_engine_parts import pil_jpeg_decoder

pytestmark = pytest.mark.triton
MODEL = STAGING / "gpu" / "preprocess_jpeg" / "1" / "model.py"


def test_the_gpu_preprocessing_runs_on_gpu_instances_and_the_cpu_one_on_cpus(onnx_meta, settings, tmp_path):
    stage("gpu", tmp_path / "gpu", settings=settings)
    [group] = parse_config(tmp_path / "gpu" / "preprocess_jpeg" / "config.pbtxt").instance_group
    assert group.kind == mc.ModelInstanceGroup.KIND_GPU and group.count == 1 and not group.gpus
    assert (tmp_path / "gpu" / "preprocess_jpeg" / "1" / "model.py").read_text() == MODEL.read_text()
    stage("cpu", tmp_path / "cpu", settings=settings)
    [group] = parse_config(tmp_path / "cpu" / "preprocess_jpeg" / "config.pbtxt").instance_group
    assert group.kind == mc.ModelInstanceGroup.KIND_CPU
    assert "decode_jpegs" not in (tmp_path / "cpu" / "preprocess_jpeg" / "1" / "model.py").read_text()


class _TritonError(Exception):
    INVALID_ARG = 3

    def __init__(self, message, code=None):
        super().__init__(message)
        self.code = code


@pytest.fixture
def model_module(monkeypatch):
    """The model file imported as the stub imports it, with triton_python_backend_utils (which exists only inside
    a running tritonserver) given the names the file uses at import and in errors."""
    utils = types.ModuleType("triton_python_backend_utils")
    utils.TritonError, utils.TritonModelException = _TritonError, RuntimeError
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", utils)
    spec = importlib.util.spec_from_file_location("gpu_preprocess_jpeg", MODEL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _cpu_instance(module):
    """The model's instance on the CPU, nvJPEG replaced by PIL (the part that needs a GPU)."""
    import torch

    model = module.TritonPythonModel()
    standin = types.SimpleNamespace(**{n: getattr(gpu_decode, n) for n in ("device_decodable", "pixels_into")},
                                    decode_jpegs=pil_jpeg_decoder)
    model.gpu, model.pre, model.torch, model.device = standin, preprocess, torch, "cpu"
    model.limits = {"max_bytes": preprocess.DEFAULT_MAX_BYTES, "max_pixels": preprocess.DEFAULT_MAX_PIXELS}
    return model


def test_a_batch_of_requests_is_preprocessed_as_the_cpu_path_does_and_a_corrupt_one_refused_alone(model_module, photos):
    model = _cpu_instance(model_module)
    png = io.BytesIO()
    Image.open(io.BytesIO(photos[2])).save(png, format="PNG")
    truncated = photos[3][: len(photos[3]) // 3]
    requests = [[photos[0], photos[1]], [png.getvalue()], [photos[4], truncated], [photos[5]]]
    import torch

    with torch.inference_mode():
        first, second, bad, last = model._all(requests)
    assert isinstance(bad, model_module._Refused) and str(bad).startswith("image 1: image data is corrupt")
    expected = preprocess.preprocess_batch([photos[0], photos[1], png.getvalue(), photos[5]])
    got = np.concatenate([first.numpy(), second.numpy(), last.numpy()])
    assert got.shape == expected.shape
    # the decoded JPEGs resized by torch against PIL (a full decode, not a reduced one): close, not identical
    assert np.abs(got - expected).mean() < 0.05
    assert np.array_equal(second.numpy(), expected[2:3])  # the PNG took the CPU path: exactly its values


def test_the_model_refuses_to_load_without_a_gpu_decoder(model_module):
    """initialize on a machine where nvJPEG cannot run fails with the reason, never decoding elsewhere."""
    import json

    model = model_module.TritonPythonModel()
    config = {"parameters": {"servelab_path": {"string_value": str(Path(preprocess.__file__).parents[2])}}}
    try:
        import torch

        usable = torch.cuda.is_available() and gpu_decode.decoder_check("cuda:0") is None
    except ImportError:
        usable = False
    if usable:
        pytest.skip("nvJPEG runs here: nothing to refuse (tests/gpu serves it)")
    with pytest.raises(RuntimeError, match="cannot run on cuda:0"):
        model.initialize({"model_config": json.dumps(config), "model_instance_device_id": "0"})
