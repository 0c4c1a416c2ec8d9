"""Device profiles: the curve's shape, the ViT-B/32 roofline's figures, and a clear error for an unknown name."""

from __future__ import annotations

import pytest

from servelab.model.device_profile import DEVICE_PROFILES, is_emulated, profile


def test_the_curve_is_flat_until_the_device_is_full_then_linear():
    p = profile("flat")
    assert p.t_s(1) == p.t_s(4) == pytest.approx(0.168)
    assert p.t_s(12) - p.t_s(4) == pytest.approx(8 * 0.040)
    assert p.batching_gain(4) == pytest.approx(4.0)
    assert p.throughput_img_s(4) == pytest.approx(4 / 0.168)
    assert profile("flat", devices=2).throughput_img_s(4) == pytest.approx(2 * 4 / 0.168)


def test_the_vit_b32_roofline_is_slowed_for_the_laptop_and_keeps_its_ratios():
    p = profile("vit-b32-h100")
    assert p.unscaled_t_s(1) == pytest.approx(0.00248, rel=0.02)  # 1 ms + 32 images x (22 us + 24 us)
    assert 0.08 < p.t_s(1) < 0.12  # slowed down 40x: a laptop serves its requests faster than that
    assert p.t_s(64) / p.t_s(1) == pytest.approx(p.unscaled_t_s(64) / p.unscaled_t_s(1))
    assert "not a measurement" in p.source and "40" in p.source


def test_every_label_says_emulated():
    assert profile("flat").label == "emulated flat"
    assert profile("flat", devices=2).label == "emulated flat, 2 devices"
    assert all(is_emulated(p.label) for p in DEVICE_PROFILES.values())
    assert not is_emulated("random-init seed 0") and not is_emulated("") and not is_emulated(None)


def test_an_unknown_profile_names_the_known_ones():
    with pytest.raises(ValueError, match="unknown device profile 'a100'.*flat"):
        profile("a100")
