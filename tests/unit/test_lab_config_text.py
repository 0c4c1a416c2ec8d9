"""config.pbtxt text edited and checked by Triton's own ModelConfig, and turned into a load request's JSON."""

from __future__ import annotations

import json

import pytest
from google.protobuf import text_format

from servelab.lab.config_text import as_json, as_text, edited

STAGED = """name: "m"
max_batch_size: 8
instance_group [ { kind: KIND_CPU, count: 1 } ]
parameters { key: "intra_op_threads", value: { string_value: "2" } }
parameters { key: "intra_op_spinning", value: { string_value: "1" } }
"""


def test_an_edit_replaces_the_instance_group_and_overrides_parameters_by_key():
    out = json.loads(as_json(edited(STAGED, 'instance_group [ { kind: KIND_CPU, count: 2 } ]\n'
                                            'parameters { key: "intra_op_threads", value: { string_value: "1" } }')))
    assert out["instance_group"] == [{"kind": "KIND_CPU", "count": 2}]
    assert out["parameters"]["intra_op_threads"] == {"string_value": "1"}
    assert out["parameters"]["intra_op_spinning"] == {"string_value": "1"}, "a parameter the edit leaves alone stays"
    assert out["max_batch_size"] == 8


def test_an_edit_without_instance_group_keeps_the_files():
    out = json.loads(as_json(edited(STAGED, 'parameters { key: "intra_op_spinning", value: { string_value: "0" } }')))
    assert out["instance_group"] == [{"kind": "KIND_CPU", "count": 1}]
    assert out["parameters"]["intra_op_spinning"] == {"string_value": "0"}


def test_a_typo_is_refused_with_where_it_is():
    with pytest.raises(text_format.ParseError, match="1:"):
        edited(STAGED, "instance_grup [ { count: 2 } ]")


def test_a_loaded_config_reads_back_as_the_same_text():
    loaded = json.loads(as_json(STAGED))
    loaded["unknown_field_of_a_newer_server"] = 1
    assert json.loads(as_json(as_text(loaded))) == json.loads(as_json(STAGED))
