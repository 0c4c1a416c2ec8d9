"""The word sets compare equal to the strings records, settings and command lines carry, and a word outside a
set is refused with the allowed words named."""

from __future__ import annotations

import json

import pytest

from servelab.config import Settings
from servelab.vocabulary import Engine, Place, Server, word


def test_a_member_is_its_string_in_comparisons_keys_and_json():
    assert Engine.ONNX_INT8 == "onnx-int8" and {"onnx": 1}[Engine.ONNX] == 1 and "torch" in {Engine.TORCH}
    assert json.dumps({"engine": Engine.ONNX, Engine.TORCH: 1}) == '{"engine": "onnx", "torch": 1}'
    assert f"{Place.NODE}" == "node"


def test_the_triton_servers_know_their_protocol():
    assert [s.protocol for s in Server if s.protocol] == ["http", "grpc"]


def test_an_unknown_word_is_refused_with_the_choices():
    with pytest.raises(ValueError, match="place must be one of local, node, got 'moon'"):
        word(Place, "moon", "place")


def test_settings_refuse_an_unknown_engine_naming_every_engine():
    with pytest.raises(ValueError, match="torch, onnx, onnx-int8, emulated"):
        Settings(engine="tensorflow").validate()


def test_a_member_prints_as_its_string_inside_a_dict():
    assert repr({"engine": Engine.ONNX}) == "{'engine': 'onnx'}"
