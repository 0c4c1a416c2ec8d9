"""The frontend's own cost (`servelab bench frontend`): requests/s and CPU per request of the service when the
device takes no time, beside the floor a bare ASGI app sets, LitServe and Triton's C++ frontend.

Every side serves the `emulated` engine on a device profile whose t(B) is about a microsecond
(`near_zero_profile`, written into the run's folder), so every millisecond a request costs is the serving layer's:
HTTP, reading the body, checking it, batching, answering. The sides:

    floor        `asgi_floor` under the same uvicorn: reads the body, answers the same 2,048 bytes, nothing else
    fastapi      servelab's service (one side per source tree in `trees`)
    litserve     the same emulated engine behind LitServe (servelab.bench.servers.litserve_app)
    triton       Triton's C++ HTTP frontend in front of the emulated model (openclip_vit_b32_emulated and its
                 uint8 variant, staged with the same profile file), driven by perf_analyzer

Each server runs alone on its cores (`taskset`, by default core 1) and its client on the others (core 0), one
body kind at a time:

    tensor   float32 [1, 3, 224, 224] (602,112 bytes): POST /embed/tensor with X-Shape 1,3,224,224 (fastapi,
             floor); base64 in JSON, as LitServe's API takes a request (litserve); Triton's input pixel_values
    uint8    the same image as uint8 pixels (150,528 bytes), normalised on the server: X-Dtype uint8 (fastapi,
             floor); Triton's uint8 variant of the model, input pixels_uint8 (servelab.triton.python_batch)
    jpeg     one 640×480 JPEG, decoded and preprocessed by the server: POST /embed (fastapi, floor); base64 in
             JSON (litserve)

What a side cannot take is recorded as unavailable with the reason, not measured: LitServe reads a request body
as JSON (or a form), so a binary tensor body is refused there (its probe is recorded), and its app takes no uint8
pixels; Triton's JPEG ensemble feeds the ONNX encoder, not the emulated one. A kind a service tree does not take
(its probe request is refused) is recorded the same way.

The clients: `wrk` (C, one thread) drives the floor, the service and LitServe with a fixed body on keep-alive
connections; perf_analyzer (C++, Triton's own client) drives Triton with the same pixels (its --input-data),
batch 1, concurrency equal to the connection count. They are not the same client, so a Triton figure beside a
wrk one is not a like-for-like comparison of clients: every Triton record, the plot and the table say so. The
service can come from other source trees too (`trees`, e.g. the code before a change), started with that tree
first on PYTHONPATH; windows of all sides are interleaved, round by round, so a drift of the machine touches
every side alike. A perf_analyzer window is one run of three time windows that make `window_s` together (a second
each at least), taken whatever they say (no stability rule, as wrk's fixed duration has none: it completes however busy the machine
is); its CPU figures are per request Triton counted over the whole run.

Records (experiment `frontend`, kind `load`), one per side, body kind and connection count: requests/s as the
median of the windows with their range, the server's CPU milliseconds per request (its process tree's CPU time
over the window ÷ requests answered) and its share of a core, latency p50/p99 from the client, and the client's
own CPU. Each names its client (`client`, `params.client_kind`), the machine that served it (`served_by`) and the
emulated device (`weights`, `params.device`): its embeddings are not CLIP's, and no figure here is a model's. A
`derived` record per service side and connection count holds the goal: the tensor path at ≥ 0.5 × the floor's
requests/s, with the band from the windows' ranges.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from servelab.bench.load.wrk import WrkResult, wrk_run, wrk_version
from servelab.bench.results.goals import goal_record
from servelab.bench.results.records import Run, memory_snapshot
from servelab.bench.servers.handle import this_machine
from servelab.bench.servers.litserve_server import LitServeProcess
from servelab.errors import CannotRun, InvalidValue
from servelab.managed_process import ManagedProcess
from servelab.model.device_profile import DeviceProfile
from servelab.netutil import free_port
from servelab.service.process import ServiceProcess
from servelab.triton.server import EmbeddedTriton
from servelab.vocabulary import Server

EXPERIMENT = "frontend"
KINDS = ("tensor", "uint8", "jpeg")
FLOOR = "asgi-floor"
SERVICE = Server.FASTAPI.value
LITSERVE = Server.LITSERVE.value
TRITON = Server.TRITON_HTTP.value
WRK, PERF_ANALYZER = "wrk", "perf_analyzer"  # the two clients (params.client_kind)
NOT_LIKE_FOR_LIKE = ("perf_analyzer (C++) drives Triton, wrk (C) the other sides: not the same client, so this is "
                     "not a like-for-like comparison of clients")
GOAL_RATIO = 0.5  # the service's tensor path at half the floor's requests/s or more
ANSWER_BYTES = 2048
TOLERANCE = 0.1  # a point is stable when its windows (three or more) lie within this fraction of their median
# --- what is sent -------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Body:
    """One request as an HTTP client sends it: `data` to `path` with `headers`; `format` says how the image is
    carried (binary | json-base64)."""

    kind: str
    path: str
    data: bytes
    headers: dict
    format: str = "binary"


@dataclass(frozen=True)
class TensorInput:
    """One request as perf_analyzer sends it to Triton: `array` (without the batch dimension) as `model`'s input
    `name`."""

    kind: str
    model: str
    name: str
    array: np.ndarray

    @property
    def nbytes(self) -> int:
        return self.array.nbytes


def photo(seed: int = 0) -> tuple[bytes, np.ndarray]:
    """(one synthetic JPEG, its crop as uint8 pixels [3, 224, 224]): every side's body is made from these."""
    from servelab.bench.load.inputs import sample_jpegs
    from servelab.model.preprocess import decode_image, pixels_pil

    jpeg = sample_jpegs(1, seed)[0]
    return jpeg, np.ascontiguousarray(pixels_pil(decode_image(jpeg, reduce_to=224)))


def _check_kinds(kinds) -> None:
    unknown = set(kinds) - set(KINDS)
    if unknown:
        raise InvalidValue(f"body kinds are {', '.join(KINDS)}; not {', '.join(sorted(unknown))}")


def bodies(kinds=KINDS, seed: int = 0) -> dict[str, Body]:
    """One request body per kind for the service and the floor, all from the same synthetic photo (the uint8
    pixels are exactly the float32 tensor before its normalisation)."""
    from servelab.model.preprocess import normalise

    _check_kinds(kinds)
    jpeg, pixels = photo(seed)
    binary = {"Accept": "application/octet-stream"}
    tensor_headers = {**binary, "Content-Type": "application/octet-stream", "X-Shape": "1,3,224,224"}
    made = {
        "tensor": Body("tensor", "/embed/tensor", normalise(pixels[None]).astype("<f4").tobytes(),
                       {**tensor_headers, "X-Dtype": "float32"}),
        "uint8": Body("uint8", "/embed/tensor", pixels.tobytes(), {**tensor_headers, "X-Dtype": "uint8"}),
        "jpeg": Body("jpeg", "/embed", jpeg, {**binary, "Content-Type": "image/jpeg"}),
    }
    return {k: made[k] for k in kinds}


def litserve_bodies(kinds=KINDS, seed: int = 0) -> dict[str, Body]:
    """The same image as LitServe's API takes a request: a JSON body (litserve_app's `tensor` + `shape`, or
    `image`), the bytes in base64. LitServe's app takes no uint8 pixels: that kind has no body here."""
    from servelab.model.preprocess import normalise

    _check_kinds(kinds)
    jpeg, pixels = photo(seed)
    json_headers = {"Content-Type": "application/json"}
    b64 = lambda data: base64.b64encode(data).decode()  # noqa: E731
    made = {
        "tensor": Body("tensor", "/predict", json.dumps({"tensor": b64(normalise(pixels[None]).astype("<f4").tobytes()),
                                                         "shape": [1, 3, 224, 224]}).encode(),
                       json_headers, "json-base64"),
        "jpeg": Body("jpeg", "/predict", json.dumps({"image": b64(jpeg)}).encode(), json_headers, "json-base64"),
    }
    return {k: made[k] for k in kinds if k in made}


def tensor_inputs(kinds=KINDS, seed: int = 0) -> dict[str, TensorInput]:
    """The same image as Triton's emulated model takes it: float32 `pixel_values`, or uint8 `pixels_uint8` to its
    uint8 variant."""
    from servelab.model.contract import INPUT_NAME, PIXEL_INPUT_NAME
    from servelab.model.preprocess import normalise
    from servelab.triton.models import EMULATED_ENCODER, uint8_model

    _check_kinds(kinds)
    _, pixels = photo(seed)
    made = {"tensor": TensorInput("tensor", EMULATED_ENCODER, INPUT_NAME, normalise(pixels)),
            "uint8": TensorInput("uint8", uint8_model(EMULATED_ENCODER), PIXEL_INPUT_NAME, pixels)}
    return {k: made[k] for k in kinds if k in made}


def near_zero_profile(folder: Path):
    """A device profile file whose every batch takes 1 µs: the device is never what a request waits for."""
    from servelab.model.device_profile import DeviceProfile, write_profile

    p = DeviceProfile(name="near-zero", fixed_ms=0.001, per_image_ms=0.0, full_at=1,
                      source="a benchmark profile: 1 µs per batch, so that what a request costs is the serving "
                             "layer's alone (servelab bench frontend)")
    return p, write_profile(p, Path(folder) / "device-profile-near-zero.json")


# --- the servers --------------------------------------------------------------------------------------------

def _pinned(cores: str | None, cmd: list[str]) -> list[str]:
    return ["taskset", "-c", cores, *cmd] if cores is not None else cmd


class Pinned:
    """A server process class's own command under `taskset -c cores` (its workers and stubs inherit the cores):
    `class PinnedX(Pinned, X)`, then `PinnedX(cores="1", …)`."""

    def __init__(self, *args, cores: str | None = None, **kw):
        super().__init__(*args, **kw)
        self.cores = cores

    def command(self) -> list[str]:
        return _pinned(self.cores, super().command())


class PinnedService(Pinned, ServiceProcess):
    """The service under `taskset -c cores`, from the source tree `tree` (None: this one)."""

    def __init__(self, *, tree: Path | None, **kw):
        super().__init__(**kw)
        self.tree = tree
        if tree is not None:
            # `python -m` puts the working directory ahead of PYTHONPATH: started from another checkout, the service
            # would import that checkout's servelab and measure it under this tree's name
            self.cwd = str(tree)

    def environment(self) -> dict:
        env = super().environment()
        if self.tree is not None:
            env["PYTHONPATH"] = os.pathsep.join([str(self.tree), *filter(None, [env.get("PYTHONPATH")])])
        return env


class PinnedLitServe(Pinned, LitServeProcess):
    """LitServe (servelab.bench.servers.litserve_app) under `taskset -c cores`."""


class PinnedTriton(Pinned, EmbeddedTriton):
    """The embedded tritonserver under `taskset -c cores`."""


class AsgiFloor(ManagedProcess):
    """`asgi_floor` under uvicorn on a free loopback port."""

    name = FLOOR

    def __init__(self, *, log_path: Path | None = None):
        super().__init__(log_path=log_path, startup_timeout=60.0)
        self.port = free_port()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def ready_url(self) -> str:
        return self.url + "/healthz"

    def command(self) -> list[str]:
        return [sys.executable, "-m", "uvicorn", "servelab.bench.servers.asgi_floor:app", "--host", self.host,
                "--port", str(self.port), "--no-access-log", "--log-level", "warning", "--http", "httptools"]


class FloorProcess(Pinned, AsgiFloor):
    """`asgi_floor` under uvicorn, under `taskset -c cores`."""


def split_cores(server_cores: str | None = None, client_cores: str | None = None) -> tuple[str | None, str | None, str]:
    """(server cores, client cores, what was done): by default the client on the first usable core and the server
    on the second; one core only: nothing is pinned, and the records say so."""
    usable = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if server_cores is None and client_cores is None:
        if len(usable) < 2 or not _has_taskset():
            return None, None, "not pinned (fewer than two cores, or no taskset): client and server share the CPU"
        client_cores, server_cores = str(usable[0]), str(usable[1])
    return server_cores, client_cores, f"server on core(s) {server_cores}, client on core(s) {client_cores} (taskset)"


def _has_taskset() -> bool:
    import shutil

    return shutil.which("taskset") is not None


def _cpu_s(pid: int) -> float:
    import psutil

    proc = psutil.Process(pid)
    total = 0.0
    for p in [proc, *proc.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):
            t = p.cpu_times()
            total += t.user + t.system
    return total


def _load_average() -> list[float] | None:
    """The machine's 1, 5 and 15 minute load averages (what `uptime` says): how quiet the machine was."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def _git_sha(tree: Path | None) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(tree or Path(__file__).parent), "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, timeout=10)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


@dataclass(frozen=True)
class Refused:
    """What a side cannot take, and why: a whole body kind (`body_format` None: the kind is not measured), or one
    way of sending it (the kind is measured another way)."""

    kind: str
    why: str
    body_format: str | None = None


@dataclass
class Side:
    """One server measured: its label, the process, what it answers as (records' `server`, `weights`), its client
    and what it is sent (`bodies` for wrk, `inputs` for perf_analyzer); `refused`: what it cannot take, and why."""

    label: str
    server: str
    proc: ManagedProcess
    weights: str
    tree: Path | None = None
    workers: int = 1
    env: dict | None = None  # settings given to the service beyond the benchmark's own (e.g. its batching delay)
    client_kind: str = WRK
    bodies: dict[str, Body] = field(default_factory=dict)
    inputs: dict[str, TensorInput] = field(default_factory=dict)
    refused: list[Refused] = field(default_factory=list)
    settings: dict = field(default_factory=dict)  # the server's own settings for the record (batching, model)
    note: str = ""
    perf: PerfClient | None = None  # the perf_analyzer that drives it (client_kind perf_analyzer)

    def url(self) -> str:
        return self.proc.url

    def takes(self, kind: str) -> bool:
        refused = any(r.kind == kind and r.body_format is None for r in self.refused)
        return not refused and kind in (self.inputs if self.client_kind == PERF_ANALYZER else self.bodies)


def _probe(url: str, body: Body) -> str | None:
    """None when `body` gets 200 from `url`; else why not (the tree does not take this kind)."""
    import httpx

    try:
        r = httpx.post(url + body.path, content=body.data, headers=body.headers, timeout=30)
    except httpx.HTTPError as exc:
        return f"no answer: {exc}"
    if r.status_code != 200:
        return f"HTTP {r.status_code}: {r.text[:300]}"
    return None


# --- one window ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Window:
    """One measurement window of one side, whichever client ran it."""

    requests: int       # requests the client counted (wrk counts a non-2xx answer as one)
    non_2xx: int
    socket_errors: int
    duration_s: float
    p50_ms: float
    p99_ms: float
    client_cpu_s: float  # the client's own CPU seconds (user + system)
    server_cpu_s: float  # the server's process tree's CPU seconds over the window
    server_queue_ms: float | None = None    # Triton's own figures (perf_analyzer reads them)
    server_compute_ms: float | None = None
    connections: int | None = None  # TCP connections the client held to the server at most (perf_analyzer)
    # what the CPU figures are over when not the window itself (perf_analyzer: its whole run, start and warm-up
    # included): the requests the server counted, and the seconds
    cpu_requests: int | None = None
    cpu_interval_s: float | None = None

    @property
    def cpu_ms_per_request(self) -> float:
        return 1000 * self.server_cpu_s / max(self.cpu_requests or self.requests - self.non_2xx, 1)

    def cpu_pct(self, cpu_s: float) -> float | None:
        interval = self.cpu_interval_s or self.duration_s
        return 100 * cpu_s / interval if interval > 0 else None

    @property
    def ok_per_s(self) -> float:
        return max(self.requests - self.non_2xx, 0) / self.duration_s if self.duration_s > 0 else 0.0


def wrk_window(res: WrkResult, server_cpu_s: float) -> Window:
    return Window(requests=res.requests, non_2xx=res.non_2xx, socket_errors=res.socket_errors,
                  duration_s=res.duration_s, p50_ms=res.p50_ms, p99_ms=res.p99_ms, client_cpu_s=res.cpu_s,
                  server_cpu_s=server_cpu_s)


class PerfClient:
    """perf_analyzer against one Triton, pinned to `cores` (servelab.triton.perf_analyzer builds, runs and reads
    it): one window is one run of three time windows (perf_analyzer's fewest) that make `seconds` together (a
    second each at least), taken whatever they say, as wrk's fixed duration is; `input_files` are the --input-data files made from each kind's
    TensorInput, so it sends the same pixels as the other sides' bodies."""

    WINDOWS = 3  # perf_analyzer's time windows per run (its stability rule needs three)
    MIN_WINDOW_MS = 1000  # shorter ones can hold no answered request (it then fails the run)

    def __init__(self, binary: Path, http_url: str, address: str, port: int, folder: Path, cores: str | None):
        self.binary, self.http_url, self.address, self.port = binary, http_url, address, port
        self.folder, self.cores = Path(folder), cores
        self.input_files: dict[str, Path] = {}

    def version(self) -> str:
        from servelab.triton import perf_analyzer as pa

        where = f"from the {pa.WHEEL} wheel" if Path(self.binary).parent == pa.home() else f"at {self.binary}"
        return f"perf_analyzer {where} (HTTP, batch 1)"

    def input_file(self, inp: TensorInput) -> Path:
        from servelab.triton import perf_analyzer as pa

        if inp.kind not in self.input_files:
            self.input_files[inp.kind] = pa.input_data_file(self.folder / f"perf-analyzer-input-{inp.kind}.json",
                                                            {inp.name: inp.array})
        return self.input_files[inp.kind]

    def window(self, inp: TensorInput, connections: int, seconds: float, server_pid: int) -> Window:
        """One run measuring about `seconds`. Rate and latency are perf_analyzer's over its windows; the server's
        and the client's CPU are counted over the whole run (its start and warm-up too), per request Triton
        counted in that time (its statistics) and per second of the run."""
        import time

        from servelab.triton import perf_analyzer as pa
        from servelab.triton.server_stats import read_stats

        interval_ms = max(self.MIN_WINDOW_MS, round(1000 * seconds / self.WINDOWS))
        csv = self.folder / f"perf-analyzer-{inp.kind}-c{connections}.csv"
        cmd = pa.command(self.binary, self.address, inp.model, concurrency=connections, input_name=inp.name,
                         shape=",".join(map(str, inp.array.shape)), time_window_ms=interval_ms, stability_pct=999,
                         max_trials=self.WINDOWS, csv=csv, input_data=self.input_file(inp))
        stats0, cpu0 = read_stats(self.http_url, inp.model), _cpu_s(server_pid)
        before, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
        res = pa.run(_pinned(self.cores, cmd), csv=csv, timeout=seconds + 120, count_port=self.port)
        wall, after = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_CHILDREN)
        server_cpu, served = _cpu_s(server_pid) - cpu0, (read_stats(self.http_url, inp.model) - stats0).requests
        measured_s = self.WINDOWS * interval_ms / 1000
        return Window(requests=round(res.throughput_img_s * measured_s), non_2xx=0, socket_errors=0,  # it fails
                      duration_s=measured_s, p50_ms=res.latency_p50_ms, p99_ms=res.latency_p99_ms,  # on an error
                      client_cpu_s=(after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
                      server_cpu_s=server_cpu, server_queue_ms=res.server_queue_ms,
                      server_compute_ms=res.server_compute_ms, connections=res.connections, cpu_requests=served,
                      cpu_interval_s=wall)


# --- the sides ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Plan:
    """What every side shares: the cores, the emulated device (profile file and devices' folder) and the log
    folder."""

    run: Run
    server_cores: str | None
    client_cores: str | None
    device: DeviceProfile
    profile_path: Path
    device_dir: Path
    kinds: tuple

    def emulated_env(self, label: str) -> dict:
        """The settings that put a servelab process on the emulated near-zero device (each side its own devices)."""
        return {"SERVELAB_ENGINE": "emulated", "SERVELAB_DEVICE_PROFILE": str(self.profile_path),
                "SERVELAB_DEVICE_DIR": str(self.device_dir / label), "SERVELAB_WARMUP_ITERS": 1}


def floor_side(stack: contextlib.ExitStack, plan: Plan) -> Side:
    proc = stack.enter_context(FloorProcess(cores=plan.server_cores, log_path=plan.run.dir / f"{FLOOR}.log"))
    return Side("floor", FLOOR, proc, "none (a bare ASGI app: no model, no device)", bodies=bodies(plan.kinds),
                note="bare ASGI floor under the same uvicorn: reads the body, answers 2,048 bytes")


def service_side(stack, plan: Plan, label: str, tree: Path | None, workers: int, env: dict | None) -> Side:
    service_env = {**plan.emulated_env(label), "SERVELAB_WORKERS": workers, **(env or {})}
    proc = stack.enter_context(PinnedService(cores=plan.server_cores, tree=tree, env=service_env,
                                             log_path=plan.run.dir / f"{SERVICE}-{label}.log"))
    return Side(label, SERVICE, proc, plan.device.label, tree=tree, workers=workers, env=dict(env or {}),
                bodies=bodies(plan.kinds), note="emulated device (near-zero t(B)): the frontend's cost, not a model's")


def litserve_side(stack, plan: Plan, max_batch: int = 16, batch_timeout: float = 0.002) -> Side:
    """LitServe serving the emulated engine; a binary tensor body is probed once, to record LitServe's answer."""
    from importlib.metadata import version

    proc = stack.enter_context(PinnedLitServe(cores=plan.server_cores, engine="emulated", max_batch=max_batch,
                                              batch_timeout=batch_timeout, env=plan.emulated_env(LITSERVE),
                                              log_path=plan.run.dir / f"{LITSERVE}.log"))
    ls_version = version("litserve")
    refused = []
    if "uint8" in plan.kinds:
        refused.append(Refused("uint8", "LitServe's app (servelab.bench.servers.litserve_app) takes a float32 "
                                        "tensor or an encoded image, not uint8 pixels"))
    if "tensor" in plan.kinds:
        answer = _probe(proc.url, Body("tensor", "/predict", bodies(("tensor",))["tensor"].data,
                                       {"Content-Type": "application/octet-stream"}))
        refused.append(Refused("tensor", (
            f"LitServe {ls_version} reads a request body as JSON, or as a form (multipart/form-data, "
            "x-www-form-urlencoded), before decode_request sees it: a raw binary tensor body "
            + (f"was refused ({answer})" if answer else "was answered, yet LitServe documents no binary body")
            + "; measured instead as base64 in JSON, as its API takes a request"), body_format="binary"))
    return Side("litserve", LITSERVE, proc, plan.device.label, bodies=litserve_bodies(plan.kinds), refused=refused,
                settings={"litserve": ls_version, "max_batch": max_batch, "batch_timeout_s": batch_timeout},
                note=f"emulated device (near-zero t(B)) behind LitServe {ls_version}; JSON bodies, base64 images, "
                     "a JSON answer (512 numbers), not 2,048 binary bytes")


def triton_side(stack, plan: Plan) -> Side:
    """Triton's C++ HTTP frontend and the emulated model (and its uint8 variant), staged with the near-zero profile
    file, and the perf_analyzer that drives it (CannotRun when there is none)."""
    from servelab.config import Settings
    from servelab.triton.control import get_config
    from servelab.triton.models import EMULATED_ENCODER, uint8_model
    from servelab.triton.repository import stage

    binary = _perf_analyzer()
    repo = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="servelab-frontend-triton-"))) / "models"
    settings = Settings.from_env().with_(device_profile=str(plan.profile_path), device_dir=plan.device_dir / TRITON)
    stage("cpu", repo, instances=1, settings=settings, uint8=True)
    proc = stack.enter_context(PinnedTriton(repo, cores=plan.server_cores,
                                            models=[EMULATED_ENCODER, uint8_model(EMULATED_ENCODER)],
                                            log_path=plan.run.dir / "tritonserver.log"))
    cfg = get_config(proc.http_url, EMULATED_ENCODER)
    refused = []
    if "jpeg" in plan.kinds:
        refused.append(Refused("jpeg", "Triton's JPEG ensemble (preprocess_jpeg, then openclip_vit_b32_cpu) feeds "
                                       "the ONNX encoder, not the emulated device: no near-zero JPEG path to measure"))
    perf = PerfClient(binary, proc.http_url, proc.http_address, proc.http_port, plan.run.dir, plan.client_cores)
    return Side("triton", TRITON, proc, cfg["parameters"]["weights"]["string_value"], client_kind=PERF_ANALYZER,
                perf=perf, inputs=tensor_inputs(plan.kinds), refused=refused,
                settings={"models": [EMULATED_ENCODER, uint8_model(EMULATED_ENCODER)],
                          "max_batch": int(cfg.get("max_batch_size", 0)),
                          "max_queue_delay_us": int(cfg.get("dynamic_batching", {})
                                                    .get("max_queue_delay_microseconds", 0)),
                          "server_build": "embedded tritonserver (nvidia-pytriton), python-backend model"},
                note=f"emulated device (near-zero t(B)) behind Triton's C++ HTTP frontend (python-backend model "
                     f"{EMULATED_ENCODER}); {NOT_LIKE_FOR_LIKE}")


# --- the experiment -----------------------------------------------------------------------------------------

def frontend(run: Run | str | None = None, *, kinds=KINDS, connections=(8, 32), window_s: float = 5.0,
             windows: int = 3, warmup_s: float = 1.0, trees: dict[str, Path | None] | None = None,
             floor: bool = True, litserve: bool = True, triton: bool = True, workers: int = 1,
             server_cores: str | None = None, client_cores: str | None = None, quick: bool = False,
             env: dict | None = None) -> list[dict]:
    """Measure each side × body kind × connection count for `windows` interleaved windows of `window_s` seconds;
    records plus the goal records. `trees`: {label: source tree} of the service (default {"fastapi": None}: this
    tree); `workers`: the service's frontend processes (SERVELAB_WORKERS); `litserve`, `triton`: measure those
    sides too (a side that cannot start here, e.g. no perf_analyzer, is recorded unavailable)."""
    run = run if isinstance(run, Run) else Run(run_id=run, name=EXPERIMENT)
    if quick:
        window_s, windows, warmup_s = min(window_s, 1.0), min(windows, 2), min(warmup_s, 1.0)
    _check_kinds(kinds)
    trees = trees or {SERVICE: None}
    server_cores, client_cores, pinning = split_cores(server_cores, client_cores)
    device, profile_path = near_zero_profile(run.dir)
    load_before = _load_average()
    out: list[dict] = []
    with contextlib.ExitStack() as stack:
        device_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="servelab-frontend-devices-")))
        plan = Plan(run, server_cores, client_cores, device, profile_path, device_dir, tuple(kinds))
        sides = _start_sides(stack, plan, out, trees=trees, floor=floor, litserve=litserve, triton=triton,
                             workers=workers, env=env)
        perf = next((s.perf for s in sides if s.perf), None)
        clients = {WRK: wrk_version() if any(s.client_kind == WRK for s in sides) else None,
                   PERF_ANALYZER: perf.version() if perf else None}
        unavailable = _probe_sides(sides, plan, out, connections=connections, warmup_s=warmup_s)
        got = _measure(sides, plan, connections=connections, windows=windows, window_s=window_s,
                       unavailable=unavailable)
        machine_load = {"load_average_before": load_before, "load_average_after": _load_average()}
        by_key = {}
        for side in sides:
            for kind in kinds:
                for c in connections:
                    ws = got.get((side.label, kind, c))
                    if not ws:
                        continue
                    rec = _record(run, side, kind, c, ws, client=clients[side.client_kind], pinning=pinning,
                                  device=device, profile_path=profile_path, window_s=window_s, quick=quick,
                                  machine_load=machine_load, clients=clients)
                    by_key[(side.label, kind, c)] = rec
                    out.append(rec)
        out += _goals(run, sides, connections, by_key)
    return out


def _unavailable(run: Run, out: list, *, server: str, side: str, kind: str, weights: str, why: str, device,
                 **params) -> None:
    out.append(run.record(EXPERIMENT, kind="unavailable", server=server, available=False, payload=kind,
                          weights=weights, note=why,
                          params={"side": side, "device": device.label, "served_by": this_machine(), **params}))


def _start_sides(stack, plan: Plan, out: list, *, trees, floor, litserve, triton, workers, env):
    """Start every side asked for; one that cannot start here is recorded unavailable (why) and left out."""
    sides: list[Side] = []
    if floor:
        sides.append(floor_side(stack, plan))
    for label, tree in trees.items():
        sides.append(service_side(stack, plan, label, tree, workers, env))
    optional = [(litserve, LITSERVE, "litserve", litserve_side), (triton, TRITON, "triton", triton_side)]
    for wanted, server, label, start in optional:
        if not wanted:
            continue
        try:
            sides.append(start(stack, plan))
        except (CannotRun, ImportError, OSError, RuntimeError) as exc:  # RuntimeError: a server's start error
            _unavailable(plan.run, out, server=server, side=label, kind=None, weights=plan.device.label,
                         why=f"{label} not measured: {exc}", device=plan.device)
    return sides


def _perf_analyzer() -> Path:
    from servelab.triton import perf_analyzer as pa

    binary = pa.find()
    if binary is None:
        raise CannotRun("perf_analyzer is not here: `servelab triton get-perf-analyzer` fetches it")
    return binary


def _probe_sides(sides, plan: Plan, out: list, *, connections, warmup_s) -> set:
    """Each side and kind once: a probe request (wrk sides) or a short perf_analyzer run (Triton) that must be
    answered, then a warm-up; what is refused is recorded unavailable. Returns the (side, kind) pairs left out."""
    from servelab.bench.load.wrk import WrkError

    unavailable = set()
    for side in sides:
        for r in side.refused:
            _unavailable(plan.run, out, server=side.server, side=side.label, kind=r.kind, weights=side.weights,
                         why=r.why, device=plan.device, body_format=r.body_format)
        for kind in plan.kinds:
            if not side.takes(kind):
                unavailable.add((side.label, kind))
                continue
            try:
                if side.client_kind == PERF_ANALYZER:
                    inp = side.inputs[kind]
                    side.perf.window(inp, max(connections), warmup_s, side.proc.pid)  # answered, and warm
                    continue
                body = side.bodies[kind]
                why = _probe(side.url(), body)
                if why is None and warmup_s > 0:
                    wrk_run(side.url() + body.path, body.data, body.headers, connections=max(connections),
                            duration_s=warmup_s, cores=plan.client_cores)
            except (CannotRun, WrkError) as exc:
                why = str(exc)
            if why:
                unavailable.add((side.label, kind))
                _unavailable(plan.run, out, server=side.server, side=side.label, kind=kind, weights=side.weights,
                             why=why, device=plan.device)
    return unavailable


def _measure(sides, plan: Plan, *, connections, windows, window_s, unavailable) -> dict:
    """windows[side, kind, conns] = [Window], interleaved: every side once per round, kind and connection count."""
    got: dict[tuple[str, str, int], list[Window]] = {}
    for _ in range(windows):
        for kind in plan.kinds:
            for c in connections:
                for side in sides:
                    if (side.label, kind) in unavailable:
                        continue
                    pid = side.proc.pid
                    if side.client_kind == PERF_ANALYZER:
                        w = side.perf.window(side.inputs[kind], c, window_s, pid)
                    else:
                        body = side.bodies[kind]
                        cpu0 = _cpu_s(pid)
                        res = wrk_run(side.url() + body.path, body.data, body.headers, connections=c,
                                      duration_s=window_s, cores=plan.client_cores)
                        w = wrk_window(res, _cpu_s(pid) - cpu0)
                    got.setdefault((side.label, kind, c), []).append(w)
    return got


def _record(run: Run, side: Side, kind: str, connections: int, ws: list[Window], *, client, pinning, device,
            profile_path, window_s, quick, machine_load, clients) -> dict:
    rates = [w.ok_per_s for w in ws]
    cpu_ms = [w.cpu_ms_per_request for w in ws]
    cpu_pct = [p for p in (w.cpu_pct(w.server_cpu_s) for w in ws) if p is not None]
    median = statistics.median(rates)
    requests = sum(w.requests for w in ws)
    non_2xx = sum(w.non_2xx for w in ws)
    if side.client_kind == PERF_ANALYZER:
        inp = side.inputs[kind]
        sent = {"body_bytes": inp.nbytes, "body_format": f"Triton binary tensor input {inp.name} "
                f"({inp.array.dtype}, {list(inp.array.shape)})", "path": f"/v2/models/{inp.model}/infer",
                "model": inp.model}
    else:
        body = side.bodies[kind]
        sent = {"body_bytes": len(body.data), "body_format": body.format, "path": body.path}
    compared = sorted(k for k, v in clients.items() if v)
    triton_stats = None
    if side.client_kind == PERF_ANALYZER:
        triton_stats = {"source": "perf_analyzer (Triton's own statistics)",
                        "queue_ms": round(statistics.median(w.server_queue_ms for w in ws), 4),
                        "compute_ms": round(statistics.median(w.server_compute_ms for w in ws), 4)}
    return run.record(
        EXPERIMENT, kind="load", server=side.server, backend=side.label,
        engine="emulated" if side.server != FLOOR else None, protocol="http", payload=kind, batch=1,
        concurrency=connections, weights=side.weights,
        throughput_img_s=round(median, 1), throughput_min_img_s=round(min(rates), 1),
        throughput_max_img_s=round(max(rates), 1), requests_per_s=round(median, 1),
        requests_per_s_min=round(min(rates), 1), requests_per_s_max=round(max(rates), 1),
        server_cpu_ms_per_request=round(statistics.median(cpu_ms), 4),
        server_cpu_ms_per_request_min=round(min(cpu_ms), 4), server_cpu_ms_per_request_max=round(max(cpu_ms), 4),
        server_cpu_pct=round(statistics.median(cpu_pct), 1) if cpu_pct else None,
        client_cpu_pct=round(statistics.median([p for p in (w.cpu_pct(w.client_cpu_s) for w in ws)
                                                if p is not None] or [0.0]), 1),
        latency_p50_ms=round(statistics.median(w.p50_ms for w in ws), 3),
        latency_p99_ms=round(statistics.median(w.p99_ms for w in ws), 3),
        requests=requests, errors=non_2xx + sum(w.socket_errors for w in ws), non_2xx=non_2xx,
        repeats=len(ws), windows_used=len(ws), spread=round((max(rates) - min(rates)) / median, 4) if median else None,
        stable=bool(len(ws) >= 3 and median and (max(rates) - min(rates)) / median <= TOLERANCE), client=client,
        cpu_pinning=pinning, quick=quick, memory=memory_snapshot(side.proc.pid), server_stats=triton_stats,
        note=side.note,
        params={"side": side.label, "served_by": this_machine(), "client": client, "client_kind": side.client_kind,
                "clients_in_run": compared, "like_for_like_clients": len(compared) < 2,
                "tree": str(side.tree) if side.tree else None, "git_sha": _git_sha(side.tree),
                "workers": side.workers if side.server == SERVICE else 1, "service_env": side.env,
                "server_settings": side.settings, "device": device.label, "device_profile": str(profile_path),
                **sent, "answer_bytes": ANSWER_BYTES if side.server in (FLOOR, SERVICE) else None,
                "window_s": window_s, "cpu_pinning": pinning, **machine_load,
                "windows": [{"requests_per_s": round(w.ok_per_s, 1), "server_cpu_s": round(w.server_cpu_s, 4),
                             "requests": w.requests, "non_2xx": w.non_2xx, "p50_ms": w.p50_ms, "p99_ms": w.p99_ms,
                             "client_cpu_s": round(w.client_cpu_s, 4), "duration_s": round(w.duration_s, 3),
                             "connections_held": w.connections, "server_counted_requests": w.cpu_requests,
                             "cpu_interval_s": round(w.cpu_interval_s, 3) if w.cpu_interval_s else None}
                            for w in ws]})


def _goals(run: Run, sides: list[Side], connections, by_key: dict) -> list[dict]:
    out = []
    for side in sides:
        if side.server != SERVICE:
            continue
        for c in connections:
            svc, fl = by_key.get((side.label, "tensor", c)), by_key.get(("floor", "tensor", c))
            if not (svc and fl and fl["requests_per_s"]):
                continue
            band = (svc["requests_per_s_min"] / fl["requests_per_s_max"], svc["requests_per_s_max"] / fl["requests_per_s_min"])
            out.append(goal_record(run, EXPERIMENT, f"{side.label}: tensor requests/s ÷ the bare-ASGI floor's, {c} "
                                   "connections, one core", svc["requests_per_s"] / fl["requests_per_s"], ">=",
                                   GOAL_RATIO, band=band, inputs=[svc, fl],
                                   note=f"client {svc['client']}; {svc['params']['device']}"))
    return out


# --- reading it ---------------------------------------------------------------------------------------------

def table_rows(records: list[dict]) -> list[dict]:
    """One row per side, body kind and connection count: requests/s (range), CPU ms per request, the share of the
    floor's requests/s for the same body and connections (`x_floor`), and the floor's CPU per request over this
    one (`x_floor_cpu`: the share a busy core would reach); `client` names who sent the load (wrk or
    perf_analyzer: not the same client)."""
    load = [r for r in records if r.get("experiment") == EXPERIMENT and r.get("kind") == "load"]
    floor = {(r["payload"], r["concurrency"]): r for r in load if r["server"] == FLOOR}
    rows = []
    for r in load:
        f = floor.get((r["payload"], r["concurrency"]))
        rows.append({"side": r["backend"], "server": r["server"], "body": r["payload"],
                     "body_format": r["params"].get("body_format"), "body_bytes": r["params"].get("body_bytes"),
                     "connections": r["concurrency"], "requests_per_s": r["requests_per_s"],
                     "range": f"{r['requests_per_s_min']:.0f}–{r['requests_per_s_max']:.0f}",
                     "cpu_ms_per_request": r["server_cpu_ms_per_request"],
                     "cpu_ms_range": f"{r['server_cpu_ms_per_request_min']:.3f}–{r['server_cpu_ms_per_request_max']:.3f}",
                     "server_cpu_pct": r["server_cpu_pct"], "client_cpu_pct": r["client_cpu_pct"],
                     "x_floor": round(r["requests_per_s"] / f["requests_per_s"], 2) if f and f["requests_per_s"] else None,
                     # the share of the floor's rate a server with this CPU cost per request would reach if its core
                     # were busy all the time (a batching delay can leave it idle, at a few connections)
                     "x_floor_cpu": round(f["server_cpu_ms_per_request"] / r["server_cpu_ms_per_request"], 2)
                     if f and r["server_cpu_ms_per_request"] else None,
                     "non_2xx": r["non_2xx"], "client": r["params"].get("client_kind", WRK)})
    return rows


def clients_sentence(records: list[dict]) -> str | None:
    """What drove the load, from the records: one client, or the two and that they are not like for like."""
    load = [r for r in records if r.get("experiment") == EXPERIMENT and r.get("kind") == "load"]
    by_kind = {r["params"].get("client_kind", WRK): r["client"] for r in load}
    if not by_kind:
        return None
    if len(by_kind) == 1:
        return f"client: {next(iter(by_kind.values()))}"
    sides = {kind: sorted({r["backend"] for r in load if r["params"].get("client_kind", WRK) == kind})
             for kind in by_kind}
    return "; ".join(f"{', '.join(sides[k])}: {v}" for k, v in by_kind.items()) + f" ({NOT_LIKE_FOR_LIKE})"


def plot(records: list[dict], path: Path) -> Path | None:
    """Requests/s per body kind, one bar per side (whiskers: the windows' range), one panel per connection count;
    a side driven by perf_analyzer is hatched and its label names the client."""
    from servelab.bench.report.plots import pyplot, save_figure

    rows = table_rows(records)
    if not rows:
        return None
    plt = pyplot()
    conns = sorted({r["connections"] for r in rows})
    kinds = [k for k in KINDS if any(r["body"] == k for r in rows)]
    sides = list(dict.fromkeys(r["side"] for r in rows))
    client_of = {r["side"]: r["client"] for r in rows}
    fig, axes = plt.subplots(1, len(conns), figsize=(5.5 * len(conns), 4.4), squeeze=False)
    width = 0.8 / len(sides)
    load = {(r["backend"], r["payload"], r["concurrency"]): r for r in records
            if r.get("experiment") == EXPERIMENT and r.get("kind") == "load"}
    for ax, c in zip(axes[0], conns, strict=True):
        for i, side in enumerate(sides):
            xs, ys, lo, hi = [], [], [], []
            for k, kind in enumerate(kinds):
                r = load.get((side, kind, c))
                if r:
                    xs.append(k + i * width)
                    ys.append(r["requests_per_s"])
                    lo.append(r["requests_per_s"] - r["requests_per_s_min"])
                    hi.append(r["requests_per_s_max"] - r["requests_per_s"])
            ax.bar(xs, ys, width, yerr=[lo, hi], capsize=3, label=f"{side} ({client_of[side]})",
                   hatch="//" if client_of[side] == PERF_ANALYZER else None)
        ax.set_xticks([k + width * (len(sides) - 1) / 2 for k in range(len(kinds))], labels=kinds)
        ax.set_title(f"{c} connections")
        ax.set_ylabel("requests/s (one image each)")
        ax.grid(alpha=0.3, axis="y")
        ax.legend(fontsize=7)
    title = "The frontend's cost on one core, emulated near-zero device"
    if len(set(client_of.values())) > 1:
        title += "\nhatched: perf_analyzer (C++), the others wrk (C): not a like-for-like comparison of clients"
    else:
        title += f" (client: {rows[0]['client']})"
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    path = save_figure(fig, path)
    plt.close(fig)
    return path


def parse_trees(text: str | None) -> dict[str, Path | None] | None:
    """`after=.,before=/work/other` -> {"after": Path("."), "before": Path("/work/other")}; None: this tree alone."""
    if not text:
        return None
    trees = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        label, sep, path = part.partition("=")
        if not sep or not label or not path:
            raise InvalidValue(f"--trees takes LABEL=PATH pairs separated by commas, got {part!r}")
        tree = Path(path).resolve()
        if not (tree / "servelab" / "service").is_dir():
            raise InvalidValue(f"--trees {label}={path}: no servelab/service in that folder")
        trees[label] = tree
    return trees
