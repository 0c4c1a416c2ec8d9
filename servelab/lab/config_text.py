"""A model's `config.pbtxt` as text a student edits, checked by Triton's own `ModelConfig` message, and turned into
the JSON that Triton's repository API takes as a config override (lessons 04 and 06b).

    my_text = edited(config_path.read_text(), 'instance_group [ { kind: KIND_CPU, count: 2 } ]')
    client.load_model(model, config=as_json(my_text), headers=...)   # POST /v2/repository/models/<model>/load

A typo fails at `text_format.Parse`, here, with the line and column, as Triton would refuse it.
"""

from __future__ import annotations

from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2


def edited(config_text: str, edit: str) -> str:
    """config.pbtxt text with the edit's instance_group in place of the file's and its parameters over the file's."""
    cfg = text_format.Parse(config_text, model_config_pb2.ModelConfig())
    change = text_format.Parse(edit, model_config_pb2.ModelConfig())
    if change.instance_group:
        del cfg.instance_group[:]
    cfg.MergeFrom(change)  # repeated fields append (emptied above), map entries such as parameters replace by key
    return text_format.MessageToString(cfg)


def as_json(config_text: str) -> str:
    """The config as Triton's load request takes it."""
    cfg = text_format.Parse(config_text, model_config_pb2.ModelConfig())
    return json_format.MessageToJson(cfg, preserving_proto_field_name=True)


def as_text(config: dict) -> str:
    """A loaded config (tritonclient's `get_model_config`, JSON) written out as config.pbtxt text."""
    return text_format.MessageToString(json_format.ParseDict(config, model_config_pb2.ModelConfig(),
                                                             ignore_unknown_fields=True))
