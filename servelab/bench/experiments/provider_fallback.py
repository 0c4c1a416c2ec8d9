"""What a plain ONNX Runtime session does when it is asked for a GPU provider this machine cannot give: it runs
anyway, on the next provider of its list, and says so only in a warning. Measured here, beside what the emulated
device fitted to the H100 reference run does at the same batch (from its profile: an emulation, not a measurement).

    fb = provider_fallback(run, model_path, device=profile("vit-b32-h100"), asked="cuda", batch=8, opts=opts)
    fb.active, fb.warnings      # ["CPUExecutionProvider"], ["Specified provider 'CUDAExecutionProvider' is not …"]
    fb.fell_back                # whether the session runs on another provider than the one asked for
    fb.measured, fb.emulated    # records: this session's img/s (measured here), the emulated device's (its profile)
    fb.cost                     # emulated ÷ measured: how many times slower the session is than the device meant

servelab's own engines refuse such a session (`servelab.model.engines.check_active_provider`); this experiment
builds one the way a user's script would, without that check, to show what the check prevents.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from servelab.bench.experiments.point import measure
from servelab.bench.load.options import LoadOpts
from servelab.bench.results.records import Run
from servelab.bench.servers.in_process import InProcess
from servelab.model.device_profile import DeviceProfile
from servelab.vocabulary import Engine

EXPERIMENT = "provider-fallback"
# ONNX Runtime's provider names, as servelab's provider words
_SHORT = {"CPUExecutionProvider": "cpu", "CUDAExecutionProvider": "cuda", "TensorrtExecutionProvider": "tensorrt"}


def short_name(provider: str) -> str:
    return _SHORT.get(provider, provider)


class PlainSession:
    """An ONNX Runtime session made as a user's script makes it, `ort.InferenceSession(path, providers=…)` and
    nothing else (ONNX Runtime's default options: its own thread count), with no check of which provider it got.
    The Embedder interface, so the bench measures it as it measures servelab's engines."""

    engine = Engine.ONNX

    def __init__(self, model: Path | bytes, asked: str):
        import onnxruntime as ort

        from servelab.model.providers import ort_providers

        self.asked = asked
        self.providers = ort_providers(asked)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            self.session = ort.InferenceSession(model if isinstance(model, bytes) else str(model),
                                                providers=self.providers)
        self.threads = self.session.get_session_options().intra_op_num_threads  # 0: ONNX Runtime chooses
        self.warnings = [str(w.message) for w in caught]
        self.active = self.session.get_providers()
        self.provider = short_name(self.active[0])
        self.weights = "as exported"
        self._input = self.session.get_inputs()[0].name

    def embed(self, batch: np.ndarray) -> np.ndarray:
        return self.session.run(None, {self._input: batch})[0]


@dataclass
class Fallback:
    """One session asked for `asked`: where it runs, what ONNX Runtime said, its measured rate and the emulated
    device's rate at the same batch."""

    asked: str
    active: list[str]
    warnings: list[str]
    measured: dict
    emulated: dict

    @property
    def fell_back(self) -> bool:
        return short_name(self.active[0]) != self.asked

    @property
    def cost(self) -> float | None:
        """The emulated device's images/s over the session's: how much the fallback costs (None: not measured)."""
        got = self.measured.get("throughput_img_s")
        return self.emulated["throughput_img_s"] / got if got else None


def device_record(run: Run, device: DeviceProfile, batch: int, experiment: str = EXPERIMENT) -> dict:
    """The emulated device's rate at `batch` from its profile at real time scale (t(B) unscaled): a derived
    record, labelled as the emulation it is."""
    t = device.unscaled_t_s(batch)
    return run.record(experiment, kind="derived", server="in-process", engine=Engine.EMULATED, provider=device.label,
                      protocol="inproc", payload="tensor", batch=batch, concurrency=1,
                      throughput_img_s=round(device.devices * batch / t, 1), latency_p50_ms=round(1000 * t, 3),
                      weights=device.label, emulated=True, measured=False,
                      params={"device": device.label, "device_source": device.source, "time_scale": 1.0},
                      note=f"{device.label} at real time scale, from its profile: an emulation, not a measurement")


def provider_fallback(run: Run, model: Path | bytes, *, device: DeviceProfile, asked: str = "cuda", batch: int = 8,
                      opts: LoadOpts | None = None, experiment: str = EXPERIMENT) -> Fallback:
    """A plain session asked for `asked` (its fallbacks after it), measured in-process at `batch`, and the
    emulated `device` at the same batch; both records say which is which."""
    session = PlainSession(model, asked)
    handle = InProcess(server="in-process", engine=session.engine, url=None, protocol="inproc", embedder=session)
    fell = short_name(session.active[0]) != asked
    measured = measure(run, experiment, handle, payload="tensor", batch=batch, opts=opts, asked_provider=asked,
                       active_providers=session.active, fallback=fell, ort_warnings=session.warnings, measured=True,
                       note=(f"asked for {asked}, ONNX Runtime ran it on {session.active[0]} without an error"
                             if fell else f"asked for {asked} and ran on it"))
    return Fallback(asked, session.active, session.warnings, measured, device_record(run, device, batch, experiment))
