"""What the lessons predict from a device profile, and the configurations they load into the emulated model
(pure functions: no server)."""

from __future__ import annotations

import pytest

from servelab.bench.experiments import emulated_lesson as emulated
from servelab.bench.load import LoadOpts
from servelab.model.device_profile import DEVICE_PROFILES, DeviceProfile

FLAT = DEVICE_PROFILES["flat"]      # 168 ms up to 4 images, then 40 ms per image
LINEAR = DEVICE_PROFILES["linear"]  # 40 ms + 1.5 ms per image


def test_two_groups_taking_turns_halve_what_one_batch_could_buy_on_a_flat_device():
    # 8 clients on a device that is flat to 8 images: one batch of 8 would buy 8x, two groups of 4 buy 4x
    wide = DeviceProfile(name="wide", fixed_ms=10, per_image_ms=1, full_at=16, source="test")
    assert wide.batching_gain(8) == pytest.approx(8)
    assert emulated.alternating_groups_gain(wide, 8) == pytest.approx(4)
    # the trial profile: 8 x 41.5 ms over 2 x 46 ms
    assert emulated.alternating_groups_gain(LINEAR, 8) == pytest.approx(8 * 41.5 / 92)
    assert emulated.alternating_groups_gain(LINEAR, 1) == 1.0


def test_a_second_instance_pays_while_the_device_has_room_and_a_second_device_once_it_is_full():
    assert emulated.two_instances_gain(FLAT, 2) == pytest.approx(2.0)          # 1 + 1 images: room
    assert emulated.two_instances_gain(FLAT, 16) == pytest.approx(1.0, rel=0.02)  # 8 + 8 images: full
    assert emulated.two_devices_gain(FLAT, 2) == pytest.approx(1.0)            # room: nothing to gain
    assert emulated.two_devices_gain(FLAT, 16) == pytest.approx(2.0, rel=0.02)  # full: the whole second device


def test_what_the_batches_that_formed_allow():
    wide = DeviceProfile(name="wide", fixed_ms=10, per_image_ms=1, full_at=16, source="test")  # t = 26 ms to 16
    # whole groups of 4 on two instances sharing a device with room: twice one instance's 4 images per t
    assert emulated.throughput_at(wide, 4, instances=2) / emulated.throughput_at(wide, 4) == pytest.approx(2.0)
    # groups broken into batches of 2.5 with two instances, 3.85 with one: what 06b measured (1.30x), not 2x
    assert emulated.throughput_at(wide, 2.5, instances=2) / emulated.throughput_at(wide, 3.85) == pytest.approx(
        5 / 3.85)
    # on a full device, instances sharing it gain nothing, instances on devices of their own double it
    full = DeviceProfile(name="full", fixed_ms=0, per_image_ms=10, full_at=1, source="test")
    assert emulated.throughput_at(full, 4, instances=2) == pytest.approx(emulated.throughput_at(full, 4))
    assert emulated.throughput_at(full, 4, instances=2, devices=2) == pytest.approx(2 * emulated.throughput_at(full, 4))
    assert emulated.throughput_at(wide, 4) == pytest.approx(4 / wide.t_s(4))


def test_short_windows_for_the_emulated_device_leave_the_smoke_windows_as_they_are():
    default = LoadOpts(min_requests=20, min_p50s=10.0, min_window_s=4.0, max_windows=6, tolerance=0.1)
    short = emulated.short_opts(default)
    assert (short.min_requests, short.min_p50s, short.min_window_s, short.max_windows) == (8, 2.0, 1.0, 4)
    assert short.tolerance == default.tolerance
    smoke, short_smoke = LoadOpts.smoke(), emulated.short_opts(LoadOpts.smoke())
    fields = ("min_requests", "min_p50s", "min_window_s", "max_windows", "tolerance", "quick")
    assert [getattr(short_smoke, f) for f in fields] == [getattr(smoke, f) for f in fields]
    # several instances sharing devices keep the notebook's window length; only the warm-up stays capped
    shared = emulated.shared_device_opts(default)
    assert (shared.min_requests, shared.min_p50s, shared.min_window_s, shared.max_windows) == (20, 10.0, 4.0, 4)
    assert shared.max_warmup_s == short.max_warmup_s == 5.0


def _emu(profile_name="vit-b32-h100"):
    base = {"name": "openclip_vit_b32_emulated", "max_batch_size": 32,
            "dynamic_batching": {"max_queue_delay_microseconds": "2000"},
            "instance_group": [{"kind": "KIND_CPU", "count": 1}],
            "parameters": {"device_profile": {"string_value": "vit-b32-h100"},
                           "weights": {"string_value": "emulated vit-b32-h100"}}}
    return emulated.EmulatedTriton("http://127.0.0.1:1", DEVICE_PROFILES[profile_name], "/tmp/devices", base)


def test_a_configuration_names_its_profile_devices_and_folder_and_its_handle_says_emulated():
    emu = _emu("flat")
    cfg = emu.config(delay_us=5000, max_batch=8, instances=2, devices=2)
    assert cfg["dynamic_batching"] == {"max_queue_delay_microseconds": "5000"}
    assert cfg["instance_group"] == [{"kind": "KIND_CPU", "count": 2}]
    assert cfg["parameters"]["device_profile"] == {"string_value": "flat"}
    assert cfg["parameters"]["emulated_devices"] == {"string_value": "2"}
    assert cfg["parameters"]["device_dir"] == {"string_value": "/tmp/devices"}
    params = emu.handle(cfg).params()
    assert params["device"] == "emulated flat, 2 devices" and "test profile" in params["device_source"]
    assert (params["instances"], params["max_queue_delay_us"], params["max_batch"], params["batching"]) == (2, 5000, 8, "on")
    off = emu.handle(emu.config(batching=False)).params()
    assert "dynamic_batching" not in emu.config(batching=False)
    assert (off["batching"], off["max_queue_delay_us"], off["device"]) == ("off", None, "emulated flat")


@pytest.mark.parametrize("bad", [dict(max_batch=0), dict(max_batch=33), dict(instances=0), dict(delay_us=-1),
                                 dict(devices=0)])
def test_a_configuration_outside_the_model_is_refused(bad):
    with pytest.raises(ValueError):
        _emu().config(**bad)


def test_a_headline_quotes_the_emulated_ratios_its_notebook_measured_labelled_with_their_profile(tmp_path):
    from servelab.bench.report.headlines import emulated_figures, emulated_findings
    from servelab.bench.results.records import Run

    run = Run(run_id="r", root=tmp_path)
    assert emulated_findings(run.dir, "06b") == [] and emulated_figures([]) == ""  # no records yet
    common = dict(kind="ab", server="A / B", ratio_min=1.9, ratio_max=2.1, stable=True, repeats=4)
    run.record("06b-emulated-devices", a="2 instances, 2 devices", b="2 instances, 1 device", ratio=2.0,
               concurrency=8, params={"device": "emulated flat"}, **common)
    run.record("06b-threads-instances", a="2 instances x 1 thread", b="1 instance x 2 threads", ratio=1.0,
               concurrency=8, params={}, **common)  # the CPU's ratio: not quoted as emulated
    run.record("04-emulated-batching", a="batching on", b="batching off", ratio=3.0, concurrency=8,
               params={"device": "emulated vit-b32-h100"}, **common)  # another notebook's
    (found,) = emulated_findings(run.dir, "06b")
    text = emulated_figures([found])
    assert text.startswith("On the emulated accelerator (an emulation, not a GPU measurement): emulated flat, 8 clients:")
    assert "2 instances, 2 devices ÷ 2 instances, 1 device throughput: 2.00×" in text
    assert "thread" not in text and "batching" not in text
    assert found.device == "emulated flat" and found.key.endswith("c=8 on emulated flat")  # labelled in its fields


def test_each_lesson_plan_names_its_experiments_and_configurations():
    (p04,) = emulated.lesson_plan("04", "vit-b32-h100", [1, 8])
    (pair,) = p04.pairs
    assert (pair.experiment, pair.label_a, pair.label_b, pair.concurrency) == (
        "04-emulated-batching", "batching on", "batching off", 8)
    assert pair.a == {"delay_us": 0} and pair.b == {"batching": False}
    assert [(s.experiment, s.config, s.concurrencies) for s in p04.sweeps] == [
        ("04-emulated-concurrency", {"delay_us": 0}, (1, 8))]

    t1_us = emulated.one_batch_delay_us(DEVICE_PROFILES["vit-b32-h100"])
    (p05a,) = emulated.lesson_plan("05a", "vit-b32-h100", [1, 8])
    assert p05a.pairs[0].a == {"delay_us": t1_us, "max_batch": 8} and p05a.pairs[0].b == {"delay_us": 0, "max_batch": 8}
    assert p05a.pairs[0].label_a == f"delay {t1_us} µs"
    assert [s.config["delay_us"] for s in p05a.sweeps] == [0, t1_us], "the grid: no delay first, then t(1)"

    room, full = emulated.lesson_plan("06b", "vit-b32-h100", [1, 8])
    assert [p.experiment for p in (*room.pairs, *full.pairs)] == [
        "06b-emulated-instances", "06b-emulated-full-instances", "06b-emulated-devices"]
    assert full.profile == FLAT and full.folder == "emulated-devices-flat"
    assert {p.concurrency for p in full.pairs} == {2 * FLAT.full_at}
    assert room.instances == full.instances == 2, "two instances: windows as long as the notebook's"


def test_a_lesson_without_an_emulated_comparison_is_refused():
    with pytest.raises(ValueError, match="04, 05a, 06b"):
        emulated.lesson_plan("07", "vit-b32-h100", [1, 8])


def test_one_batch_delay_is_t1_to_the_millisecond():
    assert emulated.one_batch_delay_us(LINEAR) == 42000  # t(1) = 41.5 ms, rounded


def test_profile_table_is_the_profiles_own_figures():
    rows = emulated.profile_table(LINEAR, {8, 1})
    assert [r["batch"] for r in rows] == [1, 8]
    assert rows[1]["batching_can_buy"] == round(LINEAR.batching_gain(8), 2)
    assert rows[0]["device"] == LINEAR.label


def test_a_comparison_on_two_devices_names_both_as_emulations():
    emu = emulated.EmulatedComparison({}, {}, ["A: an emulated accelerator", "B: an emulated accelerator"])
    assert emu.caption == "A: an emulated accelerator; and B: an emulated accelerator"
