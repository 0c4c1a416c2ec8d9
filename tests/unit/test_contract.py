"""Triton's staged configs and python models are static files: they must say what servelab.model.contract says
(tensor names, shapes, dtype, the 512-d embedding), or a client built from the contract would miss them."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import servelab
from servelab.model import contract
from servelab.triton.repository import parse_config

STAGING = Path(servelab.__file__).resolve().parent / "triton" / "staging"
CONFIGS = sorted(STAGING.glob("*/*/config.pbtxt"))
MODELS = sorted(STAGING.glob("*/*/1/model.py"))
EXPECTED = {  # tensor name -> (Triton dtype, dims without the batch)
    contract.INPUT_NAME: ("TYPE_FP32", list(contract.INPUT_SHAPE)),
    contract.OUTPUT_NAME: ("TYPE_FP32", [contract.EMBED_DIM]),
    contract.JPEG_INPUT_NAME: ("TYPE_STRING", [1]),
}


def _tensors(path: Path) -> list[tuple[str, str, list[int]]]:
    from tritonclient.grpc import model_config_pb2 as mc

    cfg = parse_config(path)
    return [(t.name, mc.DataType.Name(t.data_type), list(t.dims)) for t in [*cfg.input, *cfg.output]]


def test_the_staged_configs_are_found():
    assert len(CONFIGS) >= 6 and len(MODELS) >= 3


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: f"{p.parent.parent.name}/{p.parent.name}")
def test_staged_config_tensors_match_the_contract(path):
    tensors = _tensors(path)
    assert tensors, f"{path} declares no tensors"
    for name, dtype, dims in tensors:
        assert name in EXPECTED, f"{path}: tensor {name!r} is not in servelab.model.contract"
        assert (dtype, dims) == EXPECTED[name], f"{path}: {name} is {dtype} {dims}, the contract says {EXPECTED[name]}"


@pytest.mark.parametrize("path", MODELS, ids=lambda p: f"{p.parents[2].name}/{p.parents[1].name}")
def test_python_model_tensor_names_match_the_contract(path):
    """Each python model names its tensors in module constants INPUT / OUTPUT (it may run where servelab is not
    importable, so it cannot import the contract)."""
    names = {t.id: n.value.value for n in ast.parse(path.read_text()).body if isinstance(n, ast.Assign)
             for t in n.targets if isinstance(t, ast.Name) and isinstance(n.value, ast.Constant)}
    assert {"INPUT", "OUTPUT"} <= set(names), f"{path} has no INPUT/OUTPUT constants"
    assert {names["INPUT"], names["OUTPUT"]} <= set(EXPECTED), f"{path}: {names['INPUT']}, {names['OUTPUT']}"


def test_the_contract_is_clip_vit_b32():
    assert (contract.EMBED_DIM, contract.INPUT_SHAPE, contract.DTYPE) == (512, (3, 224, 224), "float32")
