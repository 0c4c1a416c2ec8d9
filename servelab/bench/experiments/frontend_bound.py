"""The CPU front end, not the device, as the limit: the FastAPI service in front of an emulated device at real time
scale (not slowed down), its served images/s beside what the device does at the batches the service formed, and
the share of the run the device was busy. The H100 reference run found exactly this on a real GPU; with the
device fitted to that run, a laptop shows the same shape.

    device = real_time(profile("vit-b32-h100"))                  # the fitted profile at time scale 1
    with served("fastapi", engine="emulated", max_batch=64, env=device_env(device, folder)) as srv:
        fe = frontend_bound(run, srv, device, concurrency=16, opts=opts)
    fe.served_img_s, fe.device_img_s, fe.ceiling_img_s, fe.busy_share
    fe.limit                                                      # "device", "service" or "clients"

The device's time per image served is the sum of t(B) over the batches the service ran (its own counters: batches
and images) divided by the images: exact for a profile linear from one image (full_at 1, as the fitted profile is),
a lower bound otherwise. Its busy share is the served rate times that time. Everything the device contributes is
an emulation; the service, the client and their CPU are real.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from servelab.bench.experiments.point import measure
from servelab.bench.load.cpu import CpuMeter
from servelab.bench.load.options import LoadOpts
from servelab.bench.results.records import Run
from servelab.bench.servers.handle import Served
from servelab.errors import CannotRun
from servelab.model.device_profile import DeviceProfile, write_profile

EXPERIMENT = "frontend-bound"


def real_time(p: DeviceProfile) -> DeviceProfile:
    """`p` at time scale 1: batches take as long as on the hardware the profile was fitted to."""
    return dataclasses.replace(p, name=f"{p.name}-real-time", time_scale=1.0,
                               source=f"{p.source}. Here not slowed down (time scale 1): t(1) = "
                                      f"{1000 * p.unscaled_t_s(1):.2f} ms, as the profile's own hardware takes it")


def device_env(device: DeviceProfile, folder: Path | str) -> dict:
    """The service's environment for `device`: its profile written to a file in `folder`, and the devices' state
    kept there too (this run's own device, shared with nobody)."""
    folder = Path(folder)
    path = write_profile(device, folder / f"device-profile-{device.name}.json")
    return {"SERVELAB_DEVICE_PROFILE": str(path.resolve()), "SERVELAB_DEVICE_DIR": str((folder / "devices").resolve())}


def device_busy_s(device: DeviceProfile, executions: int, images: int) -> float:
    """Seconds the device spent on `executions` batches holding `images` images: exact when t(B) is linear from
    one image (full_at 1), a lower bound otherwise (each batch counted as at least full_at images)."""
    sized = max(images, executions * device.full_at)
    return device.time_scale * (executions * device.fixed_ms + device.per_image_ms * sized) / 1000.0


@dataclass
class FrontendBound:
    """The service's measured point and what the emulated device did meanwhile."""

    record: dict        # the measured point (the service, its CPU, its batches)
    device: dict        # the derived record: the device's rate and busy share
    served_img_s: float
    device_img_s: float   # the device running the batches the service formed, back to back
    ceiling_img_s: float  # the device at the service's largest batch
    busy_share: float     # the share of the time the device was running a batch: served × device seconds per image
    avg_batch: float

    @property
    def limit(self) -> str:
        """What this run shows set the served rate: "device" when it was busy most of the time; otherwise the
        busier of the CPU side's two processes, "service" or "clients" (the load generator on the same cores).
        Only "service" is the H100 run's finding: with the clients busier, the run shows the device idle, not the
        service's own work per request as the limit."""
        if self.busy_share >= 0.5:
            return "device"
        service, clients = (self.record.get(f"{k}_cpu_pct") or 0 for k in ("server", "client_process"))
        return "clients" if clients > service else "service"


def frontend_bound(run: Run, srv: Served, device: DeviceProfile, *, concurrency: int, opts: LoadOpts | None = None,
                   payload: str = "tensor", experiment: str = EXPERIMENT) -> FrontendBound:
    """Batch-1 requests from `concurrency` clients against the service in front of `device`; the service's CPU
    and the device's busy share over the same span."""
    params = {"device": device.label, "device_source": device.source, "emulated": True}
    before = srv.snapshot()
    rec = measure(run, experiment, srv, payload=payload, batch=1, concurrency=concurrency, opts=opts,
                  meters=(CpuMeter(server_pid=srv.pid),), params=params, measured=True)
    delta = srv.delta(before, srv.snapshot()) or {}
    executions, images = int(delta.get("executions") or 0), int(delta.get("images") or 0)
    if not executions:
        raise CannotRun("the service counted no batches: is it the emulated engine, and did the requests succeed?")
    avg = images / executions
    served = float(rec["throughput_img_s"])
    busy = served * device_busy_s(device, executions, images) / images
    per_batch_s = device.time_scale * (device.fixed_ms + device.per_image_ms * max(avg, device.full_at)) / 1000.0
    max_batch = int(srv.settings.get("max_batch") or 1)
    derived = run.record(
        experiment, kind="derived", server=srv.server, engine=srv.engine, payload=payload, batch=1,
        concurrency=concurrency, throughput_img_s=served, weights=device.label, emulated=True, measured=False,
        device_img_s=round(device.devices * avg / per_batch_s, 1),
        ceiling_img_s=round(device.throughput_img_s(max_batch), 1), ceiling_batch=max_batch,
        device_busy_share=round(busy, 4), avg_batch=round(avg, 3), executions=executions, images=images,
        params={**params, "served_by": rec["params"].get("served_by")},
        note=(f"the device's rate and busy share are computed from {device.label}'s profile over the service's own "
              "batch counters (an emulation, not a measurement); the served rate is measured"))
    return FrontendBound(rec, derived, served, derived["device_img_s"], derived["ceiling_img_s"], busy, avg)
