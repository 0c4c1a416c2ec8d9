"""The emulated accelerator beside the CPU in the lessons (04, 05a, 06b): the lab's Triton also loads
`openclip_vit_b32_emulated`, whose batches wait t(B) on an emulated device instead of computing; a lesson
reloads it with the configurations it compares and measures them like the CPU model. Each lesson's comparison
is one call, its plan (`lesson_plan`) named by the lesson:

    emu = compare(step.run, triton_http_url, step.out_dir, lesson_plan("04", "vit-b32-h100", [1, 8]), opts)
    on, off, ratio = emu.pairs["04-emulated-batching"]      # emu.sweeps["04-emulated-concurrency"]: the points

One measurement, by hand:

    with emulated_triton(triton_http_url, step.out_dir / "emulated-devices", "vit-b32-h100") as emu:
        on, off, ratio = emu.ab(step.run, "04-emulated-batching", emu.config(), emu.config(batching=False),
                                label_a="batching on", label_b="batching off", concurrency=8, opts=emu.opts(opts))
        emu.profile.batching_gain(8)     # what batching can buy: t(1)·8 ÷ t(8)

Every handle's settings carry `device` ("emulated <profile>") and `device_source` (where the profile's figures
come from), so every record, table row and sentence drawn from them says it is an emulation and of what — never
a measurement of a GPU. The devices' state lives under the folder the lesson names (the run's own), so another
run on the same machine does not share this run's emulated device.

The device waits rather than computes, so its points are cheap and nearly free of noise: `opts` shortens the
notebook's windows for one instance (a few p50s each) while keeping its tolerance and window count; several
instances sharing devices keep the notebook's window length (`shared_device_opts`).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from servelab.bench.load.options import LoadOpts
from servelab.bench.servers.handle import this_machine
from servelab.bench.servers.triton_served import TritonServed
from servelab.errors import InvalidValue
from servelab.model.device_profile import DeviceProfile, profile
from servelab.triton.models import EMULATED_ENCODER

# the staged template's max_batch_size: a lesson's configurations stay within it
TEMPLATE_MAX_BATCH = 32


def short_opts(opts: LoadOpts) -> LoadOpts:
    """The notebook's load options with short windows, for the emulated device (its t(B) is exact, so a few
    p50s per window already agree; warm-up at most 5 s); a smoke run's windows are shorter still and stay as they are."""
    return dataclasses.replace(opts, min_requests=min(opts.min_requests, 8), min_p50s=min(opts.min_p50s, 2.0),
                               min_window_s=min(opts.min_window_s, 1.0), max_windows=min(opts.max_windows, 4),
                               max_warmup_s=min(opts.max_warmup_s, 5.0))


def shared_device_opts(opts: LoadOpts) -> LoadOpts:
    """For several instances on emulated devices: windows as long as the notebook's own. Which instance a client's
    request lands on, and how two instances' batches overlap on one device, change from one execution to the
    next, so a 1-s window (two or three executions) caught one pattern: on the flat device, 2 instances' windows
    went from 17.5 to 25.7 img/s within one comparison, and its ratio between runs from 1.28x to "never settled".
    The device still waits instead of computing, so these windows cost wall time, not CPU."""
    return dataclasses.replace(short_opts(opts), min_requests=opts.min_requests, min_p50s=opts.min_p50s,
                               min_window_s=opts.min_window_s)


def available(http_url: str) -> bool:
    """Whether this Triton has the emulated model loaded (the CPU repository's; a GPU node's has none)."""
    from servelab.triton.control import model_states

    try:
        return model_states(http_url).get(EMULATED_ENCODER) == "READY"
    except Exception:  # noqa: BLE001 - an unreachable server has no emulated model either
        return False


class _LabelledRun:
    """A run whose records name the emulated device as their weights (the run's own label names the model's)."""

    def __init__(self, run, weights: str):
        self._run, self._weights = run, weights

    def record(self, experiment: str, **fields) -> dict:
        fields.setdefault("weights", self._weights)
        return self._run.record(experiment, **fields)

    def __getattr__(self, name):
        return getattr(self._run, name)


@dataclass
class EmulatedTriton:
    """The lab Triton's emulated model and the profile a lesson configures it with."""

    http_url: str
    profile: DeviceProfile
    device_dir: Path
    base: dict  # the model's config as loaded, as a config override
    profile_ref: str = ""  # what the model's device_profile parameter names: the profile's name or its file
    loaded: dict | None = None  # the configuration this lesson loaded last (None: the model's own)

    def use(self, cfg: dict) -> bool:
        """Load `cfg` unless it is the one loaded already; whether it loaded. The model's own config comes back
        when the lesson's `emulated_triton` block ends, not after each measurement: one reload per change."""
        from servelab.triton.control import load_model

        if cfg == self.loaded:
            return False
        load_model(self.http_url, EMULATED_ENCODER, cfg)
        self.loaded = cfg
        return True

    @property
    def label(self) -> str:
        return self.profile.label

    @property
    def caption(self) -> str:
        """What a table of this device's points says it is."""
        return f"{self.label}: an emulated accelerator (t(B) from the profile, not a GPU measurement)"

    def opts(self, opts: LoadOpts, *, instances: int = 1) -> LoadOpts:
        """The load options for this device's points: short windows for one instance, the notebook's own for
        several (`shared_device_opts`)."""
        return shared_device_opts(opts) if instances > 1 else short_opts(opts)

    def config(self, *, batching: bool = True, delay_us: int = 0, max_batch: int = TEMPLATE_MAX_BATCH,
               instances: int = 1, devices: int | None = None) -> dict:
        """A config override of the emulated model: dynamic batching on (queue delay `delay_us`) or off,
        `instances` instances, on `devices` emulated devices (None: the profile's count)."""
        if not 1 <= max_batch <= TEMPLATE_MAX_BATCH:
            raise InvalidValue(f"max_batch_size must be 1..{TEMPLATE_MAX_BATCH}, got {max_batch}")
        if instances < 1 or delay_us < 0 or (devices is not None and devices < 1):
            raise InvalidValue("instances and devices must be >= 1 and the queue delay >= 0")
        cfg = {k: v for k, v in self.base.items() if k != "dynamic_batching"}
        cfg["max_batch_size"] = int(max_batch)
        if batching:
            cfg["dynamic_batching"] = {"max_queue_delay_microseconds": str(int(delay_us))}
        cfg["instance_group"] = [{"kind": "KIND_CPU", "count": int(instances)}]
        params = dict(cfg.get("parameters", {}))
        params["device_profile"] = {"string_value": self.profile_ref or self.profile.name}
        params["emulated_devices"] = {"string_value": str(devices or self.profile.devices)}
        params["device_dir"] = {"string_value": str(self.device_dir)}
        cfg["parameters"] = params
        return cfg

    def restore(self) -> None:
        """The model's own config again, if the lesson loaded another."""
        from servelab.triton.control import load_model

        if self.loaded is not None:
            load_model(self.http_url, EMULATED_ENCODER, self.base)
            self.loaded = None

    def _run(self, run):
        return _LabelledRun(run, self.label)

    def handle(self, cfg: dict) -> TritonServed:
        """A bench handle for the model loaded with `cfg`: its records name the emulated device, the profile's
        source and the configuration (instances, queue delay, max batch, devices, batching on or off)."""
        batching = "dynamic_batching" in cfg
        devices = int(cfg["parameters"]["emulated_devices"]["string_value"])
        on = self.profile.with_devices(devices)
        delay = int(cfg["dynamic_batching"].get("max_queue_delay_microseconds", 0)) if batching else None
        return TritonServed(server="triton-http", engine="emulated", url=self.http_url, http_url=self.http_url,
                            model=EMULATED_ENCODER, payload="tensor", protocol="http",
                            instances=sum(int(g.get("count", 1)) for g in cfg["instance_group"]),
                            max_queue_delay_us=delay, served_by=this_machine(),
                            settings={"device": on.label, "device_source": on.source, "emulated": True,
                                      "max_batch": int(cfg["max_batch_size"]), "devices": devices,
                                      "batching": "on" if batching else "off"})

    def measure(self, run, experiment: str, cfg: dict, *, concurrency: int, opts: LoadOpts,
                params: dict | None = None) -> dict:
        """One closed-loop point of batch-1 requests with the model loaded with `cfg`."""
        from servelab.bench.experiments.point import measure

        self.use(cfg)
        return measure(self._run(run), experiment, self.handle(cfg), payload="tensor", batch=1,
                       concurrency=concurrency, opts=opts, params=params)

    def sweep(self, run, experiment: str, cfg: dict, *, concurrencies: tuple, opts: LoadOpts,
              measured: tuple = ()) -> list[dict]:
        """Batch-1 clients at each concurrency with the model loaded with `cfg`; a point among `measured` (an
        A/B's sides with this configuration) is taken from there, not measured again."""
        from servelab.bench.experiments.point import already_measured
        from servelab.bench.experiments.sweeps import concurrency_sweep

        handle = self.handle(cfg)
        if not all(already_measured(measured, handle, payload="tensor", concurrency=c) for c in concurrencies):
            self.use(cfg)
        return concurrency_sweep(self._run(run), handle, concurrencies=concurrencies, payload="tensor", opts=opts,
                                 experiment=experiment, measured=measured)

    def ab(self, run, experiment: str, cfg_a: dict, cfg_b: dict, *, label_a: str, label_b: str, concurrency: int,
           opts: LoadOpts, concurrency_b: int | None = None) -> list[dict]:
        """Two configurations in alternating windows (the model reloaded when the side changes): A's record,
        B's record and the ratio A ÷ B, as servelab.bench.experiments.ab writes them."""
        from servelab.bench.experiments.interleaved import Side, ab

        configs = (cfg_a, cfg_b)
        return ab(self._run(run), experiment, Side(label_a, self.handle(cfg_a), "tensor", concurrency=concurrency),
                  Side(label_b, self.handle(cfg_b), "tensor", concurrency=concurrency_b or concurrency), opts=opts,
                  prepare=lambda side: self.use(configs[side]),
                  params={"device": self.label, "device_source": self.profile.source})


def emulated_model(http_url: str, device_dir: Path | str, device: DeviceProfile | str = "vit-b32-h100") -> EmulatedTriton:
    """The emulated model of the Triton at `http_url`, to be loaded with `device` (a profile, its name or a profile
    file) and its devices' state under `device_dir`. A profile that is not one of the named ones is written next
    to that folder, for the model to read. `restore()` loads the model's own config again."""
    from servelab.model.device_profile import DEVICE_PROFILES, write_profile
    from servelab.triton.control import config_dict, get_config

    if isinstance(device, DeviceProfile):
        chosen = device
        named = DEVICE_PROFILES.get(device.name)
        ref = (device.name if named is not None and named.with_devices(device.devices) == device
               else str(write_profile(device, Path(device_dir).resolve().parent / f"device-profile-{device.name}.json")))
    else:
        chosen = profile(device)  # an unknown name: ValueError listing the names
        ref = str(Path(device).resolve()) if device.endswith(".json") else chosen.name
    base = config_dict(get_config(http_url, EMULATED_ENCODER))
    return EmulatedTriton(http_url, chosen, Path(device_dir).resolve(), base, ref)


@contextlib.contextmanager
def emulated_triton(http_url: str, device_dir: Path | str, device_profile: DeviceProfile | str = "vit-b32-h100"
                    ) -> Iterator[EmulatedTriton]:
    """`emulated_model`, with the model's own config loaded again when the block ends."""
    emu = emulated_model(http_url, device_dir, device_profile)
    try:
        yield emu
    finally:
        emu.restore()


# --- what the profile predicts ----------------------------------------------------------------------------

def alternating_groups_gain(p: DeviceProfile, clients: int) -> float:
    """Batching on ÷ off for `clients` closed-loop clients, one instance, no queue delay: the clients split into
    two groups that take turns (each group resends while the other's batch runs), so a round of `clients`
    images takes t(a) + t(b) instead of `clients` × t(1)."""
    a = max(1, clients // 2)
    b = clients - a
    if b == 0:
        return 1.0
    return clients * p.t_s(1) / (p.t_s(a) + p.t_s(b))


def two_instances_gain(p: DeviceProfile, clients: int) -> float:
    """Two instances ÷ one on one device, `clients` clients, batching on without delay: one instance runs the
    two groups one after the other, t(a) + t(b); two run them at once, sharing the device, in t(clients)."""
    a = max(1, clients // 2)
    b = clients - a
    if b == 0:
        return 1.0
    return (p.t_s(a) + p.t_s(b)) / p.t_s(clients)


def two_devices_gain(p: DeviceProfile, clients: int) -> float:
    """Two instances on two devices ÷ on one device: each group on its own device, max(t(a), t(b)), against both
    sharing one, t(clients)."""
    a = max(1, clients // 2)
    b = clients - a
    if b == 0:
        return 1.0
    return p.t_s(clients) / max(p.t_s(a), p.t_s(b))


def throughput_at(p: DeviceProfile, avg_batch: float, instances: int = 1, devices: int = 1) -> float:
    """Images per second the emulated devices allow when each of `instances` instances (spread evenly over
    `devices` devices) always has a batch of `avg_batch` images running, as a closed loop with enough clients
    keeps them: batches that share a device run as one batch of their combined size. Fed the average batch Triton
    reports, it says what the batches that really formed allow, where the gains above assume that the clients'
    two groups stay whole."""
    per_device = instances / devices
    return instances * avg_batch / p.t_s(per_device * avg_batch)


# --- the comparison each lesson shows, in one call --------------------------------------------------------

@dataclass(frozen=True)
class Pair:
    """Two configurations (`EmulatedTriton.config` keywords) measured in alternating windows."""

    experiment: str
    a: dict
    b: dict
    label_a: str
    label_b: str
    concurrency: int


@dataclass(frozen=True)
class Sweep:
    """One configuration at each concurrency (points a pair already measured are taken from it)."""

    experiment: str
    config: dict
    concurrencies: tuple[int, ...]


@dataclass(frozen=True)
class OnDevice:
    """What a lesson measures on one emulated device, in this order: its pairs, then its sweeps. `instances`
    sizes the windows (`EmulatedTriton.opts`); the device's state lives in `folder` under the run's folder."""

    profile: DeviceProfile | str
    folder: str
    pairs: tuple[Pair, ...]
    sweeps: tuple[Sweep, ...] = ()
    instances: int = 1


@dataclass
class EmulatedComparison:
    """A lesson's measurements on the emulated device(s): each pair's [A, B, A ÷ B] and each sweep's records
    (a sweep run on several configurations under one experiment name: all of them, in plan order), by
    experiment name."""

    pairs: dict[str, list[dict]]
    sweeps: dict[str, list[dict]]
    captions: list[str]

    @property
    def caption(self) -> str:
        """What a table of these points says it is: every device it used, each labelled as an emulation."""
        return "; and ".join(self.captions)


def one_batch_delay_us(p: DeviceProfile) -> int:
    """About one batch's time on the device, t(1), rounded to the millisecond: 05a's queue delay."""
    return int(round(p.t_s(1) * 1e6, -3))


def lesson_plan(lesson: str, device_profile: DeviceProfile | str, concurrencies) -> tuple[OnDevice, ...]:
    """What lesson `lesson` ("04", "05a" or "06b") compares on the emulated accelerator, at its concurrencies:
    04 batching on and off, 05a a queue delay of t(1) and none, 06b instances and devices."""
    levels = tuple(concurrencies)
    top = max(levels)
    if lesson == "04":  # batching on vs off at the top concurrency; the "on" side is also the sweep's point there
        on = {"delay_us": 0}
        return (OnDevice(device_profile, "emulated-devices",
                         (Pair("04-emulated-batching", on, {"batching": False}, "batching on", "batching off", top),),
                         (Sweep("04-emulated-concurrency", on, levels),)),)
    if lesson == "05a":  # delay t(1) ÷ none at the top concurrency; its sides are also the grid's points there
        t1_us = one_batch_delay_us(profile(device_profile) if isinstance(device_profile, str) else device_profile)
        cfg = {d: {"delay_us": d, "max_batch": min(top, TEMPLATE_MAX_BATCH)} for d in (0, t1_us)}
        return (OnDevice(device_profile, "emulated-devices",
                         (Pair("05a-emulated-queue-delay-ratio", cfg[t1_us], cfg[0], f"delay {t1_us} µs", "delay 0 µs",
                               top),),
                         tuple(Sweep("05a-emulated-queue-delay", c, levels) for c in cfg.values())),)
    if lesson == "06b":  # instances on the lesson's device; then on a device that batches of 4 fill, twice over
        flat = profile("flat")
        full, full_c = {"max_batch": flat.full_at}, 2 * flat.full_at
        return (OnDevice(device_profile, "emulated-devices",
                         (Pair("06b-emulated-instances", {"instances": 2, "devices": 1}, {"instances": 1, "devices": 1},
                               "2 instances, 1 device", "1 instance, 1 device", top),), instances=2),
                OnDevice(flat, "emulated-devices-flat",
                         (Pair("06b-emulated-full-instances", {"instances": 2, "devices": 1, **full},
                               {"instances": 1, "devices": 1, **full}, "2 instances, 1 device", "1 instance, 1 device",
                               full_c),
                          Pair("06b-emulated-devices", {"instances": 2, "devices": 2, **full},
                               {"instances": 2, "devices": 1, **full}, "2 instances, 2 devices", "2 instances, 1 device",
                               full_c)), instances=2))
    raise InvalidValue(f"no emulated comparison for lesson {lesson!r}: one of 04, 05a, 06b")


def compare(run, http_url: str, out_dir: Path | str, plan: tuple[OnDevice, ...], opts: LoadOpts) -> EmulatedComparison:
    """Measure `plan` on the emulated model of the Triton at `http_url`, device by device (each loaded with its
    own config again when done), its devices' state under `out_dir`:

        emu = compare(step.run, triton_http_url, step.out_dir, lesson_plan("04", "vit-b32-h100", [1, 8]), opts)
        on, off, ratio = emu.pairs["04-emulated-batching"]
    """
    pairs: dict[str, list[dict]] = {}
    sweeps: dict[str, list[dict]] = {}
    captions = []
    for device in plan:
        with emulated_triton(http_url, Path(out_dir) / device.folder, device.profile) as emu:
            device_opts = emu.opts(opts, instances=device.instances)
            measured: list[dict] = []
            for p in device.pairs:
                pairs[p.experiment] = emu.ab(run, p.experiment, emu.config(**p.a), emu.config(**p.b),
                                             label_a=p.label_a, label_b=p.label_b, concurrency=p.concurrency,
                                             opts=device_opts)
                measured += pairs[p.experiment][:2]
            for s in device.sweeps:
                sweeps.setdefault(s.experiment, []).extend(
                    emu.sweep(run, s.experiment, emu.config(**s.config), concurrencies=s.concurrencies,
                              opts=device_opts, measured=tuple(measured)))
            captions.append(emu.caption)
    return EmulatedComparison(pairs, sweeps, captions)


def profile_table(p: DeviceProfile, batches) -> list[dict]:
    """The profile's figures at these batch sizes (not a measurement): t(B) as emulated and unscaled, what
    batching can buy, and the device's images per second."""
    return [{"device": p.label, "batch": n, "t_ms": round(1000 * p.t_s(n), 1),
             "t_unscaled_ms": round(1000 * p.unscaled_t_s(n), 3), "batching_can_buy": round(p.batching_gain(n), 2),
             "device_img_s": round(p.throughput_img_s(n), 1)} for n in sorted(batches)]
