"""Lab parameters: profiles (smoke | default | full), `--param key=value` parsing, per-notebook injection.

A profile is one dict of knobs shared by every notebook (durations, sweep sizes). Each notebook declares the
knobs it uses in its `parameters` cell; the runner injects only those (papermill's own inspection), so a
notebook never receives a name it does not know, and a `--param` that no selected notebook declares is an
error rather than a silent no-op.
"""

from __future__ import annotations

from typing import Any

import yaml

# Knobs every profile defines. Notebooks pick what they need; names are the parameter names in the cells.
# extra_servers: start servers beyond the run's stack for a comparison (a torch-engine service in 04, the
# LitServe peer in 06a); the smoke profile skips them to stay at seconds per notebook and says so.
PROFILES: dict[str, dict[str, Any]] = {
    # seconds per notebook: used by the tests and for checking a setup
    "smoke": dict(
        duration_s=0.4, warmup_s=0.0, repeats=1, requests=2,
        batch_sizes=[1, 2], concurrency_levels=[1, 2], queue_delays_us=[0, 2000],
        instance_counts=[1, 2], serialisation_batches=[1, 4], n_photos=12,
        profile_runs=1, extra_servers=False, engines=["onnx", "onnx-int8"],
    ),
    # about 20 minutes on 2 cores for the whole lab
    "default": dict(
        duration_s=6.0, warmup_s=1.0, repeats=1, requests=0,
        batch_sizes=[1, 4, 16, 32], concurrency_levels=[1, 4, 16, 32], queue_delays_us=[0, 2000, 10000],
        instance_counts=[1, 2], serialisation_batches=[1, 4, 16], n_photos=60,
        profile_runs=4, extra_servers=True, engines=["torch", "onnx", "onnx-int8"],
    ),
    # longer sweeps, repeated until stable; for a quiet machine
    "full": dict(
        duration_s=10.0, warmup_s=2.0, repeats=3, requests=0,
        batch_sizes=[1, 2, 4, 8, 16, 32], concurrency_levels=[1, 2, 4, 8, 16, 32, 64],  # Triton CPU max batch 32
        queue_delays_us=[0, 500, 2000, 5000, 10000, 20000], instance_counts=[1, 2, 3, 4],
        serialisation_batches=[1, 4, 16, 64], n_photos=200, profile_runs=10,
        extra_servers=True, engines=["torch", "onnx", "onnx-int8"],
    ),
}

def profile(name: str) -> dict[str, Any]:
    if name not in PROFILES:
        raise ValueError(f"profile must be one of {', '.join(PROFILES)}, got {name!r}")
    return dict(PROFILES[name], profile=name)


def parse_param(text: str) -> tuple[str, Any]:
    """`key=value` -> (key, value); value parsed as YAML so `3`, `0.5`, `[1, 4]`, `true` get their types."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key.isidentifier():
        raise ValueError(f"--param expects key=value with a Python identifier as key, got {text!r}")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return key, value


def parse_params(items: list[str] | None) -> dict[str, Any]:
    return dict(parse_param(t) for t in (items or []))


def for_notebook(declared: set[str], values: dict[str, Any]) -> dict[str, Any]:
    """The subset of `values` that a notebook declares in its parameters cell."""
    return {k: v for k, v in values.items() if k in declared}
