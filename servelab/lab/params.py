"""Lab parameters: profiles (smoke | default | full | gpu), `--param key=value` parsing, per-notebook injection.

A profile is one dict of knobs shared by every notebook (durations, sweep sizes). Each notebook declares the
knobs it uses in its `parameters` cell; the runner injects only those (papermill's own inspection), so a
notebook never receives a name it does not know, and a `--param` that no selected notebook declares is an
error rather than a silent no-op.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

from servelab.bench.load.options import GPU_LOAD  # the GPU preset lives with the load options
from servelab.errors import InvalidValue
from servelab.vocabulary import LabProfile, word

# Knobs every profile defines. Notebooks pick what they need; names are the parameter names in the cells.
# load: how each point is measured (servelab.bench.load.LoadOpts fields): windows of at least `min_requests`
# completions, `min_p50s` p50 latencies and `min_window_s` seconds, repeated until the last `stable_windows` agree within
# `tolerance` or `max_windows` were measured; `quick` marks a smoke run whose numbers are not results.
# service_batching_baseline: 04 also measures the FastAPI service with max_batch 1 against batching (two more
# torch services for one ratio: full and gpu only; the default lab measures Triton's baseline).
# extra_servers: start servers beyond the run's stack for a comparison (a torch-engine service in 04, the
# LitServe peer in 06a, the overload knee's two services and the monitored service in 06c); the smoke profile
# skips them to stay at seconds per notebook and says so.
# job_photos: the photos 09's job scans, embeds and groups (thousands from the default profile on: the job is the
# point; a smoke run checks its steps on a few dozen).
# cold_build: where a Docker engine answers, 02 also times the service image built from scratch (--no-cache:
# every package downloaded again, about a minute on 2 cores); the smoke profile times the cached rebuild only.
# A smoke run checks that every step runs: two windows per point and one window pair per interleaved comparison
# exercise every path the results take (a second pair would reload a reconfigured model twice more for numbers that
# are not results), and the suite runs the smoke lab several times
SMOKE_LOAD = {"min_requests": 1, "min_p50s": 1.0, "max_windows": 2, "stable_windows": 2, "max_pairs": 1,
              "tolerance": 0.5, "max_warmup_s": 10.0, "quick": True}
# min_window_s: a shared machine's speed moves in bursts of seconds; a window of 20 requests at a 70 ms p50
# (1.4 s) rides one burst, so windows last at least 2 s whatever the p50 (a ratio's pairs share their minutes, so
# the drift between them cancels; 3-s windows kept the default lab over its 20 minutes, 4-s ones more). Past that,
# 10 requests and 5 p50s: at batch 8 or 8 clients (p50 0.3-0.6 s) 20 requests and 10 p50s stretched windows to
# 6-12 s for no steadier a figure. Two windows that agree settle a point (perf_analyzer asks three; a third window
# for every point and pair was a third of the default lab's measuring time on two cores, where the lab must fit
# 20 minutes); at most 4: a point still moving after them says it never settled
DEFAULT_LOAD = {"min_requests": 10, "min_p50s": 5.0, "min_window_s": 2.0, "stable_windows": 2, "max_windows": 4,
                "tolerance": 0.1, "quick": False}
FULL_LOAD = {"min_requests": 40, "min_p50s": 10.0, "min_window_s": 6.0, "max_windows": 12, "tolerance": 0.05,
             "quick": False}

LAB_PROFILES: dict[LabProfile, dict[str, Any]] = {
    # seconds per notebook: used by the tests and for checking a setup (numbers are not results)
    LabProfile.SMOKE: dict(
        load=SMOKE_LOAD, batch_sizes=[1, 2], concurrency_levels=[1, 2], queue_delays_us=[0, 2000],
        instance_counts=[1, 2], serialisation_batches=[1, 4], n_photos=12, job_photos=60,
        profile_runs=1, extra_servers=False, cold_build=False, engines=["onnx", "onnx-int8"],
        service_batching_baseline=False,
    ),
    # about 15-19 minutes on 2 cores for the whole lab: every point settles or says it did not. A window lasts
    # >= 2 s, 5 p50s and 10 requests (at c=8 or batch 8 about 3-4 s), so the sweeps have two points each
    LabProfile.DEFAULT: dict(
        load=DEFAULT_LOAD, batch_sizes=[1, 8], concurrency_levels=[1, 8], queue_delays_us=[0, 4000],
        instance_counts=[1, 2], serialisation_batches=[1, 4, 16], n_photos=60, job_photos=2000,
        profile_runs=4, extra_servers=True, cold_build=True, engines=["torch", "onnx", "onnx-int8"],
        service_batching_baseline=False,
    ),
    # longer sweeps, tighter tolerance; for a quiet machine
    LabProfile.FULL: dict(
        load=FULL_LOAD, batch_sizes=[1, 2, 4, 8, 16, 32], concurrency_levels=[1, 2, 4, 8, 16, 32],  # Triton CPU max batch 32
        queue_delays_us=[0, 500, 2000, 5000, 10000, 20000], instance_counts=[1, 2, 3, 4],
        serialisation_batches=[1, 4, 16, 64], n_photos=200, job_photos=5000, profile_runs=10,
        extra_servers=True, cold_build=True, engines=["torch", "onnx", "onnx-int8"],
        service_batching_baseline=True,
    ),
    # one GPU machine (`servelab lab run --device cuda --profile gpu`): batches to 256, clients to 128; the stack
    # is staged with max batch 256 on the GPU. Meant to finish within one short lease (not yet timed on a GPU)
    LabProfile.GPU: dict(
        load=GPU_LOAD, batch_sizes=[1, 16, 64, 256], concurrency_levels=[1, 16, 64, 128],
        queue_delays_us=[0, 500, 2000], instance_counts=[1, 2], serialisation_batches=[1, 16, 64, 256],
        n_photos=256, job_photos=5000, profile_runs=4, extra_servers=True, cold_build=True, engines=["torch", "onnx", "onnx-int8"],
        service_batching_baseline=True,
    ),
}


def profile(name: str) -> dict[str, Any]:
    name = word(LabProfile, name, "profile")
    return dict(LAB_PROFILES[name], profile=name)


@dataclass(frozen=True)
class StackLimits:
    """What a node's stacks must admit for a lab profile to run without refusals: the largest batch it sends in
    one request, the most clients at once, and the images those may hold waiting. The prepare step writes
    `service_env()` into docker/.env (read by every compose file in docker/) and stages Triton with
    `triton_max_batch`, so the profile is the one place these numbers come from."""

    max_images: int       # images in one request (the service's SERVELAB_MAX_IMAGES)
    max_in_flight: int    # requests at once (SERVELAB_MAX_IN_FLIGHT)
    always_admit: int     # requests at once admitted whatever their wait: every client (SERVELAB_ALWAYS_ADMIT)
    max_queue: int        # images waiting (SERVELAB_MAX_QUEUE)
    max_body_bytes: int   # one request's body, a batch of float32 tensors included (SERVELAB_MAX_BODY_BYTES)
    triton_max_batch: int  # the staged GPU models' max_batch_size (SERVELAB_TRITON_MAX_BATCH)

    def service_env(self) -> dict[str, str]:
        """The service's variables (servelab.config.Settings.from_env), as the compose files pass them on."""
        return {"SERVELAB_MAX_IMAGES": str(self.max_images), "SERVELAB_MAX_IN_FLIGHT": str(self.max_in_flight),
                "SERVELAB_ALWAYS_ADMIT": str(self.always_admit),
                "SERVELAB_MAX_QUEUE": str(self.max_queue), "SERVELAB_MAX_BODY_BYTES": str(self.max_body_bytes)}


def largest_batch(name: str) -> int:
    """The most images the profile's notebooks put in one request."""
    p = profile(name)
    return max(p["batch_sizes"] + p["serialisation_batches"])


def most_clients(name: str) -> int:
    return max(profile(name)["concurrency_levels"])


def stack_limits(name: str) -> StackLimits:
    """The node stacks' limits for lab profile `name`: never below the service's own defaults, nor below the
    GPU encoder template's max_batch_size, and large enough for every batch and client count the profile sends."""
    import math

    from servelab.config import Settings
    from servelab.model.contract import INPUT_SHAPE
    from servelab.triton.models import GPU_ENCODER
    from servelab.triton.repository import STAGING, parse_config

    d, batch, clients = Settings(), largest_batch(name), most_clients(name)
    template_batch = parse_config(STAGING / "gpu" / GPU_ENCODER / "config.pbtxt").max_batch_size
    body = batch * math.prod(INPUT_SHAPE) * 4 + (1 << 20)  # a batch of float32 tensors, and 1 MiB for the framing
    return StackLimits(max_images=max(d.max_images_per_request, batch), max_in_flight=max(d.max_queue, clients),
                       always_admit=max(d.always_admit, clients),
                       max_queue=max(d.max_queue, batch, clients), max_body_bytes=max(d.max_body_bytes, body),
                       triton_max_batch=max(template_batch, batch))


def parse_param(text: str) -> tuple[str, Any]:
    """`key=value` -> (key, value); value parsed as YAML so `3`, `0.5`, `[1, 4]`, `true` get their types."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key.isidentifier():
        raise InvalidValue(f"--param expects key=value with a Python identifier as key, got {text!r}")
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


# Seconds each notebook may take, per profile, on the slowest 2-core machine these labs have met. The runner prints
# each notebook's time beside its budget and the report's notebook table shows both, so a notebook that grew is seen
# at once; a notebook over its budget is reported, not failed. Default budgets: the slowest time a notebook took in
# the default runs of the course at its present size (13 notebooks) on 2-core AMD EPYC Zen 4 VMs, rounded up by
# about a tenth: those runs took 26-35 minutes, on VMs whose speed differed by up to 2x between sessions (the
# slowest, with its drift probe at a median 9 img/s, gave most of the figures). 02's default budget also holds the
# cold image build where a Docker engine answers. Smoke budgets: smoke runs on the same machines.
BUDGETS_S: dict[str, dict[str, float]] = {
    "smoke": {"00": 10, "01": 45, "02": 60, "03": 45, "04": 90, "05a": 60, "05b": 10, "06a": 30, "06b": 160,
              "06c": 15, "07": 60, "08": 15, "09": 30},
    "default": {"00": 10, "01": 180, "02": 180, "03": 180, "04": 490, "05a": 230, "05b": 10, "06a": 210,
                "06b": 320, "06c": 160, "07": 300, "08": 15, "09": 290},
}


def budget_s(profile: str, notebook_id: str) -> float | None:
    """The notebook's time budget in this profile (None: the profile has none, e.g. `full`)."""
    return BUDGETS_S.get(profile, {}).get(notebook_id)
