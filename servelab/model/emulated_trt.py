"""An emulated TensorRT engine cache, kept as ONNX Runtime's TensorRT execution provider keeps one: which request
pays an engine build, which one a rebuild, and when a restart finds the engine on disk. An emulation: no engine
is built and no GPU is used; the cache folder holds small JSON stand-ins for the engine and its `.profile`.

    cache = EmulatedTrtCache(folder, prefix="openclip_<sha256>")   # the config's trt_engine_cache_prefix
    s = cache.session()                    # no trt_profile_* options: the shape range comes from the inputs seen
    s.run(8)                               # Event: "build" for batch 8..8 (the first input pays it)
    s.run(4)                               # Event: "rebuild", 4 lies outside 8..8; the range becomes 4..8
    s.run(6)                               # Event: "run", inside the range
    cache.session().events                 # a restart: "load from cache" (the engine and its .profile read back)
    cache.session(profile=(1, 16, 64))     # trt_profile_* given: one build at load covers 1..64; a restart loads it
    play(cache, [[1, 8, 4], [8, 32]])      # two starts of the model and their requests: one row per event

How the EP decides, as ONNX Runtime's TensorRT EP documentation describes it: an engine serves one shape range
per dynamic input. Without explicit profile shapes the range is taken from the inputs and saved beside the
engine in a `.profile` file; an input outside it updates the range and rebuilds the engine (and its cache
entry). With `trt_profile_min/opt/max_shapes` the range is fixed before the first input, so the engine is built
when the session is created, and a cached engine is reused only while the options match its saved profile. An
engine is specific to the model, the precision and the GPU: each is part of the cache entry's name here.

The timings are the emulation's, each with its source (`TrtTimings.source`); every event says it is emulated.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from servelab.errors import InvalidValue
from servelab.model.device_profile import DEFAULT_PROFILE, DeviceProfile, profile

EMULATED_TRT = "emulated TensorRT engine cache"  # what every event and table of it says it is


@dataclass(frozen=True)
class TrtTimings:
    """How long the emulated EP takes to build an engine, to load one from the cache, and to run a batch."""

    build_s: float
    load_s: float
    device: DeviceProfile  # t(B) of a batch once the engine is there (unscaled: the profile's own hardware)
    source: str

    @classmethod
    def default(cls) -> TrtTimings:
        device = profile(DEFAULT_PROFILE)
        return cls(build_s=180.0, load_s=5.0, device=device, source=(
            "build 180 s: the middle of the 2–5 min the photo-dedup write-ups report for a TensorRT model's first "
            "start; load from the cache 5 s: an assumption of this emulation (deserialising an engine "
            f"skips the build), not a measurement; a batch's run time: t(B) of {device.label} unscaled (fitted to "
            "the H100 reference run's torch engine; that run built no TensorRT engine)"))


@dataclass(frozen=True)
class Event:
    """What one step cost: the session's load or one request's batch."""

    step: str              # "load" or "request N"
    batch: int | None
    action: str            # build | rebuild | load from cache | run | nothing to load
    engine_range: str      # the batch sizes the engine serves after this step ("" before there is one)
    emulated_s: float      # the time it took, from TrtTimings (not waited, not measured)
    why: str

    def as_row(self) -> dict:
        return {"step": self.step, "batch": self.batch, "action": self.action, "engine_range": self.engine_range,
                "emulated_s": round(self.emulated_s, 4), "why": self.why, "device": EMULATED_TRT}


class EmulatedTrtCache:
    """A cache folder of emulated engines for one model export on one GPU, in one precision."""

    def __init__(self, folder: Path | str, *, prefix: str, timings: TrtTimings | None = None,
                 gpu: str = "NVIDIA H100 80GB HBM3", precision: str = "fp16"):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.timings = timings or TrtTimings.default()
        key = hashlib.sha256(f"{gpu}|{precision}".encode()).hexdigest()[:12]
        self.name = f"{prefix}_{key}"  # the export (its prefix), the GPU and the precision: change one, build again

    @property
    def engine_file(self) -> Path:
        return self.folder / f"{self.name}.engine"

    @property
    def profile_file(self) -> Path:
        return self.folder / f"{self.name}.profile"

    def files(self) -> list[str]:
        return sorted(p.name for p in self.folder.iterdir())

    def session(self, profile: tuple[int, int, int] | None = None) -> EmulatedTrtSession:
        """A new session on this cache (a start or restart of the model): `profile` = (min, opt, max) batch of
        the trt_profile_* options, or None for none."""
        return EmulatedTrtSession(self, profile)

    def _saved(self) -> dict | None:
        if not (self.engine_file.is_file() and self.profile_file.is_file()):
            return None
        return json.loads(self.profile_file.read_text())

    def _save(self, lo: int, hi: int, explicit: tuple[int, int, int] | None) -> None:
        self.engine_file.write_text(json.dumps({"emulated": True, "note": "a stand-in, not a TensorRT plan"}) + "\n")
        self.profile_file.write_text(json.dumps({"pixel_values": [lo, hi], "explicit": list(explicit or ())}) + "\n")


@dataclass
class EmulatedTrtSession:
    cache: EmulatedTrtCache
    profile: tuple[int, int, int] | None = None
    events: list[Event] = field(default_factory=list)
    range: tuple[int, int] | None = None
    requests: int = 0

    def __post_init__(self):
        if self.profile is not None:
            lo, opt, hi = self.profile
            if not 1 <= lo <= opt <= hi:
                raise InvalidValue(f"a profile needs 1 <= min <= opt <= max, got {self.profile}")
        t, saved = self.cache.timings, self.cache._saved()
        if saved is not None and (self.profile is None or saved.get("explicit") == list(self.profile)):
            self.range = tuple(saved["pixel_values"])
            self._event("load", None, "load from cache", t.load_s, f"{self.cache.engine_file.name} and its .profile "
                        f"are there: the engine for {self._range()} is read back, not built")
        elif self.profile is not None:
            self.range = (self.profile[0], self.profile[2])
            self.cache._save(*self.range, self.profile)
            self._event("load", None, "build", t.build_s, "the profile fixes the shape range before any input: the "
                        "engine is built when the session is created (a warm-up request pays nothing more)"
                        + ("; the cached engine's .profile names other options" if saved is not None else ""))
        else:
            self._event("load", None, "nothing to load", 0.0, "no cached engine and no profile: the engine is built "
                        "when the first input shows its shape")

    def _range(self) -> str:
        return f"batch {self.range[0]}..{self.range[1]}" if self.range else ""

    def _event(self, step, batch, action, seconds, why) -> Event:
        e = Event(step, batch, action, self._range(), seconds, why)
        self.events.append(e)
        return e

    def run(self, batch: int) -> Event:
        """One request's batch of `batch` images."""
        if batch < 1:
            raise InvalidValue(f"a batch holds at least one image, got {batch}")
        self.requests += 1
        t, step = self.cache.timings, f"request {self.requests}"
        run_s = t.device.unscaled_t_s(batch)
        if self.range is None:
            self.range = (batch, batch)
            self.cache._save(batch, batch, None)
            return self._event(step, batch, "build", t.build_s + run_s, f"the first input: an engine for batch {batch} "
                               "alone is built while this request waits")
        lo, hi = self.range
        if lo <= batch <= hi:
            return self._event(step, batch, "run", run_s, f"{batch} lies inside the engine's range")
        if self.profile is not None:
            raise InvalidValue(f"batch {batch} lies outside the explicit profile {lo}..{hi}: this emulation does not "
                               "model it (Triton never forms such a batch while max_batch_size <= the profile's max)")
        self.range = (min(lo, batch), max(hi, batch))
        self.cache._save(*self.range, None)
        return self._event(step, batch, "rebuild", t.build_s + run_s, f"{batch} lies outside {lo}..{hi}: the range "
                           "widens and the engine is built again while this request waits")


def play(cache: EmulatedTrtCache, starts: list[list[int]], profile: tuple[int, int, int] | None = None) -> list[dict]:
    """Each list in `starts` is one start of the model (the first, then restarts on the same cache) and the batches
    its requests carry; one row per event, numbered by start."""
    rows = []
    for n, batches in enumerate(starts, 1):
        session = cache.session(profile)
        for b in batches:
            session.run(b)
        rows += [{"start": n, **e.as_row()} for e in session.events]
    return rows
