"""The export is what its metadata says, matches torch, keeps a dynamic batch axis, and init is deterministic."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import onnxruntime as ort

from servelab.fileio import file_digest
from servelab.model.contract import INPUT_NAME, OUTPUT_NAME
from servelab.model.export import artifact_paths
from servelab.model.preprocess import preprocess_bytes
from tests.conftest import cosine


def test_metadata_describes_the_files(onnx_meta, settings):
    paths = artifact_paths(settings)
    meta = json.loads(paths["meta"].read_text())
    assert meta["weights"] == "random-init (seed 0)" or not meta["weights"].startswith("random-init")
    assert meta["sha256"] == file_digest(paths["fp32"])
    assert meta["int8"]["sha256"] == file_digest(paths["int8"])
    assert meta["inputs"][0]["name"] == INPUT_NAME and meta["inputs"][0]["shape"] == ["batch", 3, 224, 224]
    assert meta["outputs"][0]["name"] == OUTPUT_NAME and meta["outputs"][0]["shape"] == ["batch", 512]
    assert meta["opset"] >= 13
    assert meta["parity"]["fp32_min_cosine_vs_torch"] >= 0.9999
    assert meta["int8"]["min_cosine_vs_torch"] >= 0.995


def test_onnx_matches_torch_on_photos(onnx_meta, settings, photos):
    from servelab.model.engines import make_embedder

    batch = np.stack([preprocess_bytes(p) for p in photos[:4]])
    torch_out = make_embedder(settings, engine="torch").embed(batch)
    onnx_out = make_embedder(settings, engine="onnx").embed(batch)
    int8_out = make_embedder(settings, engine="onnx-int8").embed(batch)
    assert cosine(torch_out, onnx_out).min() >= 0.9999
    assert cosine(torch_out, int8_out).min() >= 0.995
    for out in (torch_out, onnx_out, int8_out):
        assert out.shape == (4, 512) and out.dtype == np.float32
        assert np.allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-4)


def test_dynamic_batch_axis(onnx_meta, photos):
    sess = ort.InferenceSession(onnx_meta["path"], providers=["CPUExecutionProvider"])
    batch = np.stack([preprocess_bytes(p) for p in photos[:3]])
    together = sess.run([OUTPUT_NAME], {INPUT_NAME: batch})[0]
    alone = np.concatenate([sess.run([OUTPUT_NAME], {INPUT_NAME: batch[i : i + 1]})[0] for i in range(3)])
    assert together.shape == (3, 512)
    assert np.abs(together - alone).max() < 1e-4


def test_random_init_is_identical_across_processes(settings):
    code = (
        "from servelab.model.torch_model import build_image_encoder;"
        "import torch;"
        "m,_=build_image_encoder();"
        "print(float(sum(p.double().sum() for p in m.parameters())))"
    )
    # two processes at once: each spends most of its time importing torch and building the model
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err for _, err in outs]
    runs = [out.split()[-1] for out, _ in outs]
    assert runs[0] == runs[1]
    if not (settings.pretrained or settings.checkpoint):  # built at random on purpose: labelled, not warned about
        assert not any("initialized randomly" in err for _, err in outs), [err for _, err in outs]


def test_only_open_clips_random_init_warning_is_dropped(caplog):
    import logging

    from servelab.model.torch_model import _no_random_init_warning

    with caplog.at_level(logging.WARNING), _no_random_init_warning():
        logging.warning("No pretrained weights loaded for model 'ViT-B-32'. Model initialized randomly.")
        logging.warning("something else")
    logging.warning("No pretrained weights loaded for model 'x'. Model initialized randomly.")  # filter removed
    assert [r.getMessage()[:14] for r in caplog.records] == ["something else", "No pretrained "]


def test_export_cli_fails_loudly_on_unavailable_provider(settings):
    """An engine on a provider that is not here is an error, never a silent CPU run."""
    import pytest

    from servelab.model.engines import EngineError, make_embedder

    if "CUDAExecutionProvider" in ort.get_available_providers():
        pytest.skip("CUDA provider present on this machine")
    with pytest.raises(EngineError, match="not available"):
        make_embedder(settings, engine="onnx", provider="cuda")
