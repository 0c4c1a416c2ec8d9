"""The emulated TensorRT engine cache: the first input builds, an input outside the range rebuilds and widens it,
a restart loads from the cache, an explicit profile builds once at load; every event says it is emulated."""

from __future__ import annotations

import pytest

from servelab.model.device_profile import profile
from servelab.model.emulated_trt import EMULATED_TRT, EmulatedTrtCache, TrtTimings, play

TIMINGS = TrtTimings(build_s=100.0, load_s=2.0, device=profile("linear"), source="test")


def _actions(rows):
    return [(r["start"], r["step"], r["action"], r["engine_range"]) for r in rows]


def test_without_a_profile_the_inputs_decide_the_range_and_each_new_extreme_rebuilds(tmp_path):
    cache = EmulatedTrtCache(tmp_path, prefix="openclip_abc", timings=TIMINGS)
    rows = play(cache, [[4, 4, 8, 2, 6], [6, 16]])
    assert _actions(rows) == [
        (1, "load", "nothing to load", ""), (1, "request 1", "build", "batch 4..4"), (1, "request 2", "run", "batch 4..4"),
        (1, "request 3", "rebuild", "batch 4..8"), (1, "request 4", "rebuild", "batch 2..8"),
        (1, "request 5", "run", "batch 2..8"),
        (2, "load", "load from cache", "batch 2..8"), (2, "request 1", "run", "batch 2..8"),
        (2, "request 2", "rebuild", "batch 2..16")]
    built = [r for r in rows if r["action"] in ("build", "rebuild")]
    assert all(r["emulated_s"] == pytest.approx(100.0 + profile("linear").unscaled_t_s(r["batch"])) for r in built)
    assert all(r["device"] == EMULATED_TRT for r in rows)
    assert cache.files() == ["openclip_abc_" + cache.name.rsplit("_", 1)[1] + ext for ext in (".engine", ".profile")]


def test_an_explicit_profile_builds_once_at_load_and_a_restart_loads_it(tmp_path):
    cache = EmulatedTrtCache(tmp_path, prefix="p", timings=TIMINGS)
    rows = play(cache, [[1, 64, 8], [32]], profile=(1, 32, 64))
    assert _actions(rows) == [
        (1, "load", "build", "batch 1..64"), (1, "request 1", "run", "batch 1..64"), (1, "request 2", "run", "batch 1..64"),
        (1, "request 3", "run", "batch 1..64"), (2, "load", "load from cache", "batch 1..64"),
        (2, "request 1", "run", "batch 1..64")]
    assert rows[0]["emulated_s"] == 100.0 and rows[4]["emulated_s"] == 2.0


def test_other_profile_options_or_another_gpu_build_again(tmp_path):
    play(EmulatedTrtCache(tmp_path, prefix="p", timings=TIMINGS), [[1]], profile=(1, 16, 32))
    again = EmulatedTrtCache(tmp_path, prefix="p", timings=TIMINGS).session((1, 32, 64)).events
    assert again[0].action == "build" and "other options" in again[0].why
    other_gpu = EmulatedTrtCache(tmp_path, prefix="p", timings=TIMINGS, gpu="NVIDIA A100").session((1, 32, 64))
    assert other_gpu.events[0].action == "build"


def test_a_batch_outside_an_explicit_profile_is_not_modelled(tmp_path):
    s = EmulatedTrtCache(tmp_path, prefix="p", timings=TIMINGS).session((1, 4, 8))
    with pytest.raises(ValueError, match="outside the explicit profile 1..8"):
        s.run(9)


def test_the_default_timings_name_their_sources():
    t = TrtTimings.default()
    assert t.device.name == "vit-b32-h100" and "photo-dedup" in t.source and "assumption" in t.source
