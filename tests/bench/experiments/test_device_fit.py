"""`servelab bench device-profile`: a profile fitted to a run's measured batch curve. The round trip measures
the emulated engine itself (a real `servelab bench batch-sweep` run) and must get its profile back."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from servelab.bench.experiments.device_fit import batch_curve, fit_profile
from servelab.model.device_profile import profile, read_profile

SERVELAB = [sys.executable, "-c", "from servelab.cli import main; main()"]


@pytest.mark.parametrize("name", ["flat", "linear", "vit-b32-h100", "vit-b32-h100-roofline"])
def test_the_fit_recovers_a_profile_from_its_own_curve(name):
    p = profile(name)
    curve = {b: p.unscaled_t_s(b) for b in (1, 2, 4, 8, 16, 32, 64)}
    fitted = fit_profile(curve, name="x", source="test")
    for b in curve:
        assert fitted.unscaled_t_s(b) == pytest.approx(curve[b], rel=1e-3)


def test_a_curve_of_one_batch_size_is_refused():
    with pytest.raises(ValueError, match="at least two batch sizes"):
        fit_profile({1: 0.01}, name="x", source="test")


def test_records_of_several_engines_need_a_choice():
    recs = [{"kind": "raw", "engine": e, "provider": "cpu", "batch": b, "throughput_img_s": 10.0 * b}
            for e in ("onnx", "torch") for b in (1, 8)]
    with pytest.raises(ValueError, match="several engines.*--engine"):
        batch_curve(recs)
    assert batch_curve(recs, engine="torch") == {1: pytest.approx(0.1), 8: pytest.approx(0.1)}


def test_a_profile_written_from_a_measured_run_reproduces_the_device_that_was_measured(tmp_path):
    env = {**os.environ, "SERVELAB_RESULTS": str(tmp_path / "results"), "SERVELAB_DEVICE_PROFILE": "flat",
           "SERVELAB_DEVICE_DIR": str(tmp_path / "devices")}

    def cli(*args):
        r = subprocess.run(SERVELAB + list(args), capture_output=True, text=True, env=env, timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
        return r.stdout

    cli("bench", "batch-sweep", "--server", "in-process", "--engine", "emulated", "--batches", "1,4,8,12",
        "--quick", "--run-id", "measured")
    out = cli("bench", "device-profile", "measured", "--time-scale", "1")
    path = tmp_path / "results" / "measured" / "device-profile-emulated-emulated-flat.json"
    assert str(path) in out
    fitted = read_profile(path)
    assert "fitted to run measured" in fitted.source and fitted.time_scale == 1
    for b in (1, 4, 8, 12):  # within 15 %: one-request smoke windows carry a busy machine's scheduling delays
        assert fitted.t_s(b) == pytest.approx(profile("flat").t_s(b), rel=0.15)
    assert profile(str(path)).name == fitted.name  # SERVELAB_DEVICE_PROFILE accepts the file


def test_the_measured_h100_profile_is_the_fit_of_the_reference_run():
    """vit-b32-h100 (the lessons' default) is what `servelab bench device-profile` fits to the committed H100 run; a run with
    several curves of one engine (precisions, device-resident or host-fed) needs them named."""
    from pathlib import Path

    from servelab.bench.experiments.device_fit import batch_curve, fit_profile
    from servelab.bench.results.records import load_records
    from servelab.model.device_profile import profile

    records = load_records(Path(__file__).resolve().parents[3] / "reference" / "nvidia-h100-80gb-hbm3")
    with pytest.raises(ValueError, match="several curves of that engine"):
        batch_curve(records, engine="torch", provider="cuda")
    curve = batch_curve(records, engine="torch", provider="cuda", precision="bf16", experiment="gpu-raw-host")
    assert sorted(curve) == [1, 64, 256]
    fitted, named = fit_profile(curve, name="x", source="test"), profile("vit-b32-h100")
    assert (fitted.fixed_ms, fitted.per_image_ms, fitted.full_at) == pytest.approx(
        (named.fixed_ms, named.per_image_ms, named.full_at), rel=1e-3)
    assert "fitted to the H100 reference run" in named.source
