"""Checks the lab runs on rendered deployment configs where the hardware to run them is missing (05b).

The rules are the TensorRT stanza's own (servelab.triton.tensorrt), read through Triton's ModelConfig
protobuf, so a row that passes means Triton would see that value, not that a string appears in a file.
"""

from __future__ import annotations

from dataclasses import astuple
from pathlib import Path

import pandas as pd


def check_trt_config(path: str | Path, cache_path: str | None = None) -> pd.DataFrame:
    """One row per property a TensorRT-EP deployment needs: what it is, the value found, ok, why it matters.
    `cache_path`: the mounted engine-cache volume (default: any absolute path)."""
    from servelab.triton.repository import parse_config
    from servelab.triton.tensorrt import deployment_rules, stanza_rules

    cfg = parse_config(Path(path))
    rules = stanza_rules(cfg, max_batch=cfg.max_batch_size, cache_path=cache_path, input_name=cfg.input[0].name)
    rules += deployment_rules(cfg)
    return pd.DataFrame([astuple(r)[:4] for r in rules], columns=["setting", "value", "ok", "why it matters"])
