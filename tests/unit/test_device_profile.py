"""Device profiles: the curve's shape, the ViT-B/32 roofline's figures, the default fitted to the H100 run, and a clear
error for an unknown name."""

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
    p = profile("vit-b32-h100-roofline")
    assert p.unscaled_t_s(1) == pytest.approx(0.00248, rel=0.02)  # 1 ms + 32 images x (22 us + 24 us)
    assert 0.08 < p.t_s(1) < 0.12  # slowed down 40x: a laptop serves its requests faster than that
    assert p.t_s(64) / p.t_s(1) == pytest.approx(p.unscaled_t_s(64) / p.unscaled_t_s(1))
    assert "not a measurement" in p.source and "40" in p.source


def test_the_default_profile_is_the_one_fitted_to_the_h100_run():
    """What the service, Triton's emulated model and the lessons use unless told otherwise."""
    from pathlib import Path

    from servelab.config import Settings
    from servelab.model.device_profile import DEFAULT_PROFILE, read_profile

    root = Path(__file__).resolve().parents[2]
    assert Settings().device_profile == DEFAULT_PROFILE
    assert f'string_value: "{DEFAULT_PROFILE}"' in (
        root / "servelab/triton/staging/cpu/openclip_vit_b32_emulated/config.pbtxt").read_text()
    p, fitted = profile(DEFAULT_PROFILE), read_profile(root / "reference/nvidia-h100-80gb-hbm3/device-profile-torch-cuda-bf16.json")
    assert (p.fixed_ms, p.per_image_ms, p.full_at, p.time_scale) == (
        fitted.fixed_ms, fitted.per_image_ms, fitted.full_at, fitted.time_scale)
    assert "nvidia-h100-80gb-hbm3" in p.source and "not a measurement of a GPU" in p.source


def test_every_label_says_emulated():
    assert profile("flat").label == "emulated flat"
    assert profile("flat", devices=2).label == "emulated flat, 2 devices"
    assert all(is_emulated(p.label) for p in DEVICE_PROFILES.values())
    assert not is_emulated("random-init seed 0") and not is_emulated("") and not is_emulated(None)


def test_an_unknown_profile_names_the_known_ones():
    with pytest.raises(ValueError, match="unknown device profile 'a100'.*flat"):
        profile("a100")
