"""The service in front of the emulated device at real time scale: the device's time is read from the service's
own batch counters and the profile, beside the rate the clients measured."""

from __future__ import annotations

import pytest

from servelab.bench.experiments.frontend_bound import (
    FrontendBound,
    device_busy_s,
    device_env,
    frontend_bound,
    real_time,
)
from servelab.bench.load.options import LoadOpts
from servelab.bench.results.records import Run
from servelab.bench.servers.lifecycle import served
from servelab.model.device_profile import profile


def test_busy_time_is_exact_for_a_linear_profile_and_a_lower_bound_otherwise():
    linear = profile("linear")  # 40 ms + 1.5 ms per image
    assert device_busy_s(linear, executions=3, images=10) == pytest.approx(3 * 0.040 + 10 * 0.0015)
    flat = profile("flat")  # 8 ms + 40 ms x max(B, 4)
    assert device_busy_s(flat, executions=2, images=2) == pytest.approx(2 * 0.008 + 8 * 0.040)


@pytest.mark.parametrize("busy, service_cpu, client_cpu, limit", [
    (0.8, 90.0, 40.0, "device"),
    (0.2, 90.0, 40.0, "service"),
    (0.22, 33.0, 79.0, "clients"),  # a run whose clients were busier once read as the H100 run's finding
])
def test_the_limit_is_the_device_or_the_busier_process_of_the_cpu_side(busy, service_cpu, client_cpu, limit):
    rec = {"server_cpu_pct": service_cpu, "client_process_cpu_pct": client_cpu}
    assert FrontendBound(rec, {}, 300.0, 1350.0, 6700.0, busy, 6.7).limit == limit


def test_real_time_keeps_the_curve_and_says_so():
    p = profile("vit-b32-h100")
    rt = real_time(p)
    assert rt.time_scale == 1.0 and rt.t_s(64) == pytest.approx(p.unscaled_t_s(64))
    assert rt.label == "emulated vit-b32-h100-real-time" and "time scale 1" in rt.source


def test_the_service_in_front_of_the_device_reports_what_the_device_did(tmp_path):
    device = real_time(profile("vit-b32-h100"))
    run = Run("fe", root=tmp_path / "results", weights="none")
    with served("fastapi", engine="emulated", max_batch=8, env=device_env(device, tmp_path / "device")) as srv:
        fe = frontend_bound(run, srv, device, concurrency=4, opts=LoadOpts.smoke(min_requests=20))
    assert fe.record["errors"] == 0 and fe.record["params"]["device"] == device.label
    assert fe.record["server_cpu_pct"] is not None  # the service's CPU, measured over the same windows
    stats = fe.record["server_stats"]
    assert fe.device["images"] == stats["images"] >= stats["requests"]["/embed/tensor 200"]  # one image a request
    assert 1 <= fe.avg_batch <= 8 and fe.avg_batch == pytest.approx(stats["images"] / stats["executions"], rel=1e-3)
    per_image_s = device_busy_s(device, stats["executions"], stats["images"]) / stats["images"]
    assert fe.busy_share == pytest.approx(fe.served_img_s * per_image_s, rel=1e-3) and 0 < fe.busy_share < 1
    # batches of the average size back to back: B ÷ (fixed + per-image × B), the profile being linear from one image
    assert fe.device_img_s == pytest.approx(
        1000 * fe.avg_batch / (device.fixed_ms + device.per_image_ms * fe.avg_batch), rel=1e-2)
    assert fe.ceiling_img_s == pytest.approx(8 / device.t_s(8), rel=1e-3)
    d = fe.device
    assert d["kind"] == "derived" and d["emulated"] is True and d["measured"] is False
    assert d["weights"] == device.label and "not a measurement" in d["note"]
