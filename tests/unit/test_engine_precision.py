"""The torch engine's precision setting (fp32 | fp16 | bf16): bf16 runs here on the CPU and stays close to fp32;
fp16 is for the GPU (tests/gpu); the ONNX engines refuse anything but the fp32 export."""

from __future__ import annotations

import numpy as np
import pytest

from servelab.config import Settings
from tests.conftest import cosine


def test_bf16_torch_engine_matches_fp32(settings, photos):
    from servelab.model.engines import make_embedder
    from servelab.model.preprocess import preprocess_batch

    x = preprocess_batch(photos[:2])
    fp32 = make_embedder(settings, engine="torch", provider="cpu", precision="fp32")
    bf16 = make_embedder(settings, engine="torch", provider="cpu", precision="bf16")
    assert bf16.info()["precision"] == "bf16"
    a, b = fp32.embed(x), bf16.embed(x)
    assert b.dtype == np.float32 and b.shape == (2, 512)
    assert cosine(a, b).min() >= 0.99
    assert not np.array_equal(a, b)  # it really ran in bf16


@pytest.mark.parametrize("engine", ["onnx", "onnx-int8"])
def test_onnx_engines_refuse_half_precision(engine):
    with pytest.raises(ValueError, match="precision fp16 needs engine torch"):
        Settings(engine=engine, precision="fp16").validate()


def test_unknown_precision_is_refused():
    with pytest.raises(ValueError, match="precision must be one of fp32, fp16, bf16"):
        Settings(engine="torch", precision="int4").validate()


def test_torch_engine_refuses_tensorrt(settings):
    from servelab.model.engines import EngineError, make_embedder

    with pytest.raises(EngineError, match="torch runs on cpu or cuda"):
        make_embedder(settings, engine="torch", provider="tensorrt")
