"""Settings read from SERVELAB_* environment variables.

One place for every knob, so the service, the CLI, the containers and the notebooks agree on names and
defaults. Values are read when `Settings.from_env()` is called, never at import time.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from servelab.errors import CannotRun, InvalidValue
from servelab.vocabulary import Engine, Precision, Provider, word


def _checkout() -> Path | None:
    """The course repository this package runs from (an editable install or PYTHONPATH), else None."""
    root = Path(__file__).resolve().parent.parent
    return root if (root / "pyproject.toml").is_file() and (root / "notebooks").is_dir() else None


# The clone of the course repository, when servelab runs from one: its notebooks, docker/ and scripts/ live
# there, not in the installed package.
CHECKOUT = _checkout()


def workspace() -> Path:
    """Where servelab keeps what it makes (artifacts/, models/, results/, build/): SERVELAB_HOME, else the
    course checkout it runs from, else the current directory."""
    home = os.environ.get("SERVELAB_HOME")
    return Path(home) if home else (CHECKOUT or Path.cwd())


def results_dir() -> Path:
    """The one results folder (SERVELAB_RESULTS, else <workspace>/results): bench runs and lab runs share it."""
    configured = os.environ.get("SERVELAB_RESULTS")
    return Path(configured) if configured else workspace() / "results"


def checkout() -> Path:
    """The course repository, for what only a clone has (notebooks/, docker/, k8s/, scripts/)."""
    if CHECKOUT is None:
        raise CannotRun("this needs the course repository (notebooks/, docker/, k8s/, scripts/), which an "
                        "installed package does not carry: clone servelab and `pip install -e .` inside it")
    return CHECKOUT

# Default loopback ports: service 8002, Triton HTTP 8003, gRPC 8004, metrics 8005, review UI 8000.
SERVICE_PORT = 8002
TRITON_HTTP_PORT = 8003
TRITON_GRPC_PORT = 8004
TRITON_METRICS_PORT = 8005
REVIEW_PORT = 8000



def _env(name: str, default, cast=str):
    raw = os.environ.get(f"SERVELAB_{name}")
    if raw is None or raw == "":
        return default
    try:
        return cast(raw)
    except ValueError as exc:
        raise InvalidValue(f"SERVELAB_{name}={raw!r} is not a valid {cast.__name__}") from exc


def triton_state_dir() -> Path:
    """Where `servelab triton up` records the server it started (SERVELAB_TRITON_STATE_DIR, else
    <workspace>/build/triton)."""
    configured = os.environ.get("SERVELAB_TRITON_STATE_DIR")
    return Path(configured) if configured else workspace() / "build" / "triton"


# the node's endpoints a lab run at place `node` talks to (servelab.lab.places.node_endpoints): each has a
# SERVELAB_NODE_<NAME>_HOST and _PORT of its own, beside SERVELAB_NODE_HOST for all of them
NODE_ENDPOINTS = ("service", "triton_http", "triton_grpc", "triton_metrics")


def _web_concurrency(default: int) -> int:
    """WEB_CONCURRENCY, the worker count platforms (and uvicorn, and gunicorn) read, when it is set."""
    raw = os.environ.get("WEB_CONCURRENCY")
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise InvalidValue(f"WEB_CONCURRENCY={raw!r} is not a valid int") from None


# where the service may decode JPEG files (Settings.decode)
DECODE_PLACES = ("auto", "device", "cpu")


def _flag(raw: str) -> bool:
    """A switch's text: 1, true, yes or on (any case) is on; anything else is off."""
    return raw.strip().lower() in ("1", "true", "yes", "on")


@dataclass(frozen=True)
class Settings:
    # model
    model_name: str = "ViT-B-32"
    pretrained: str | None = None  # open_clip tag, e.g. laion2b_s34b_b79k (needs internet)
    checkpoint: str | None = None  # local checkpoint file
    seed: int = 0  # random-init seed when neither of the above is set
    artifacts: Path = field(default_factory=lambda: workspace() / "artifacts")
    # engine
    engine: str = Engine.ONNX  # servelab.vocabulary.Engine
    provider: str = Provider.CPU
    threads: int = 0  # 0 = every core this process may use (servelab.fingerprint.usable_cores)
    # the service's ONNX engine on a CPU: this many instances, each on cores ÷ instances threads, running batches
    # side by side, and a batch that finds them idle on all cores (servelab.model.engines.EngineInstances);
    # 1: one session on all cores, one batch at a time
    engine_instances: int = 2
    precision: str = Precision.FP32  # the torch engine's only; the ONNX engines run the fp32 export
    # the emulated accelerator (engine `emulated`): its profile, device count (0 = the profile's) and the folder
    # whose state files every process using it shares, as processes share one GPU
    device_profile: str = "vit-b32-h100"
    emulated_devices: int = 0
    # the emulated devices' shared state: a temporary folder of this user's, which every process of theirs shares
    # (a Triton container mounts the servelab package read-only, so the workspace is no place for it); one folder
    # per user, so another user of the machine can neither read it nor plant links in it
    device_dir: Path = field(
        default_factory=lambda: Path(tempfile.gettempdir()) / f"servelab-emulated-devices-{os.getuid()}")
    # service
    host: str = "127.0.0.1"
    port: int = SERVICE_PORT
    # frontend processes on one port (SERVELAB_WORKERS, else WEB_CONCURRENCY as uvicorn and gunicorn read it): each
    # owns its engine, batcher, gate and metrics; on a CPU each engine gets cores ÷ workers threads
    workers: int = 1
    # with several workers, the folder under which each run of the service keeps its workers' metrics (a private
    # folder per run, made and emptied when it starts: prometheus-client's multiprocess mode), so one scrape of
    # /metrics covers every worker; a temporary folder of this user's, as device_dir is
    metrics_dir: Path = field(
        default_factory=lambda: Path(tempfile.gettempdir()) / f"servelab-metrics-{os.getuid()}")
    # the run's own folder of metrics its workers share, set by the launcher for each worker (never read from the
    # environment); None: this process's metrics alone
    metrics_run_dir: Path | None = None
    max_batch: int = 16
    max_delay_ms: float = 2.0
    max_queue: int = 64  # images waiting; more -> 503 with Retry-After
    max_in_flight: int | None = None  # requests read/decoded/queued/run at once; more -> 503 before reading
    #                                   (None: same number as max_queue; 0: no limit)
    decode_threads: int = 1  # threads decoding images (the decode pool); on 2 cores, two decoding threads gave
    #                          0.79x the throughput of one at c=8: they took the cores the engine's threads need
    # where the service decodes JPEG files: `device` (the torch engine's device, torchvision's decode_jpeg: batched
    # nvJPEG on cuda), `cpu` (the decode pool, PIL) or `auto`, the device where the engine is torch on cuda and
    # its decoder runs there, else the CPU (/info says which is in force and why). PNG, WebP and JPEGs the device
    # would read differently always take the CPU path (servelab.service.codecs.device_jpegs)
    decode: str = "auto"
    # the torch engine on cuda replays one CUDA graph of the forward pass per batch bucket (servelab.model.engines)
    cuda_graphs: bool = False
    request_timeout_s: float = 30.0  # a request still queued after this is dropped with 503 (0 = never)
    # how long a request the time bound admits may wait, once its body is in, before the engine takes it (decoding,
    # queued): a request the engine's pace says would wait longer is refused at the door, one that has waited longer
    # is dropped, both with 503. None: one full batch (max_batch images) at the engine's measured pace, at least
    # 250 ms, so the bound follows the machine (0 = no bound). On a CPU a batch's run grows with its images and the
    # gate keeps about a budget's worth of them in flight, so an accepted answer takes up to about twice the budget
    max_wait_ms: float | None = None
    # requests in flight admitted whatever their expected wait, and never dropped for it, while the gate refuses
    # nobody: a closed loop never has more requests in flight than clients, so the lab's closed loops (up to 32
    # clients, any batch, any CPU) are never refused; past capacity the first refusal turns this off until its
    # Retry-After has passed, and the time bound alone keeps the accepted requests' wait short (0 = none)
    always_admit: int = 32
    max_images_per_request: int = 32
    max_bytes: int = 20 * 1024 * 1024  # per image
    max_pixels: int = 40_000_000  # per image (decompression-bomb guard)
    # per request, refused with 413 by Content-Length or by bytes read, before the body is buffered; it bounds what
    # one request can hold in memory and spill to the temporary folder (k8s: the pod's /tmp and memory limits)
    max_body_bytes: int = 64 * 1024 * 1024
    body_timeout_s: float = 30.0  # a body still arriving this long after its headers is dropped with 408
    # a request line and headers still arriving this long after the connection opened (or its last answer) close the
    # connection: a client trickling its headers holds a connection and a file descriptor until then
    header_timeout_s: float = 10.0
    warmup_iters: int = 2
    # Triton's own bind, apart from the service's: publishing the service (host=0.0.0.0) never publishes Triton,
    # whose model control loads code (servelab.triton.access restricts it to a key as well)
    triton_host: str = "127.0.0.1"
    # the key of a Triton this process did not start (a compose stack's, from docker/.env); servelab finds the key
    # of a Triton it started by itself (servelab.triton.access.key_for)
    triton_key: str | None = field(default=None, repr=False)
    # how the process that started this one placed client and server on cores (servelab.bench.load.cpu.pinned);
    # a lab run's notebook kernels are given it, and their CPU meters report it
    cpu_pinning: str | None = None
    # the TensorRT provider's engine and timing caches (servelab.model.providers.tensorrt_options)
    trt_cache: Path = Path("artifacts/trt_cache")
    # what an image built on a stand-in base says it is (scripts/standin_images.sh sets it in the base), so the
    # rehearsal's rows say they ran on stand-ins (servelab.fingerprint.standin)
    standin: str | None = None
    # an exercise check that fails raises ExerciseFailed unless told otherwise (the grader's mode)
    checks_strict: bool = False
    # where the lab's servers run (servelab.lab.places): the place ("" = local; the node's Jupyter containers set
    # node), and the node's endpoints: one host for all, or a host and a port per endpoint (NODE_ENDPOINTS)
    place: str = ""
    node_host: str = "127.0.0.1"
    node_hosts: dict[str, str] = field(default_factory=dict)
    node_ports: dict[str, int] = field(default_factory=dict)
    node_triton_model: str | None = None  # the node's encoder when it is not the GPU one (the rehearsal's stand-in)
    # the Triton a client talks to when it is given no URL or model (servelab.client.triton.TritonBackend)
    triton_url: str | None = None
    triton_grpc_url: str | None = None
    triton_model: str | None = None
    triton_jpeg_model: str | None = None

    @classmethod
    def from_env(cls, **overrides) -> Settings:
        d = cls()
        values = dict(
            model_name=_env("MODEL", d.model_name),
            pretrained=_env("PRETRAINED", None),
            checkpoint=_env("CHECKPOINT", None),
            seed=_env("SEED", d.seed, int),
            artifacts=Path(_env("ARTIFACTS", str(d.artifacts))),
            engine=_env("ENGINE", d.engine),
            provider=_env("PROVIDER", d.provider),
            threads=_env("THREADS", d.threads, int),
            engine_instances=_env("ENGINE_INSTANCES", d.engine_instances, int),
            precision=_env("PRECISION", d.precision),
            device_profile=_env("DEVICE_PROFILE", d.device_profile),
            emulated_devices=_env("EMULATED_DEVICES", d.emulated_devices, int),
            device_dir=Path(_env("DEVICE_DIR", str(d.device_dir))),
            host=_env("HOST", d.host),
            port=_env("PORT", d.port, int),
            workers=_env("WORKERS", _web_concurrency(d.workers), int),
            metrics_dir=Path(_env("METRICS_DIR", str(d.metrics_dir))),
            max_batch=_env("MAX_BATCH", d.max_batch, int),
            max_delay_ms=_env("MAX_DELAY_MS", d.max_delay_ms, float),
            max_queue=_env("MAX_QUEUE", d.max_queue, int),
            max_in_flight=_env("MAX_IN_FLIGHT", None, int),
            decode_threads=_env("DECODE_THREADS", d.decode_threads, int),
            decode=_env("DECODE", d.decode),
            cuda_graphs=_env("CUDA_GRAPHS", d.cuda_graphs, _flag),
            request_timeout_s=_env("REQUEST_TIMEOUT_S", d.request_timeout_s, float),
            max_wait_ms=_env("MAX_WAIT_MS", d.max_wait_ms, float),
            always_admit=_env("ALWAYS_ADMIT", d.always_admit, int),
            max_images_per_request=_env("MAX_IMAGES", d.max_images_per_request, int),
            max_bytes=_env("MAX_BYTES", d.max_bytes, int),
            max_pixels=_env("MAX_PIXELS", d.max_pixels, int),
            max_body_bytes=_env("MAX_BODY_BYTES", d.max_body_bytes, int),
            body_timeout_s=_env("BODY_TIMEOUT_S", d.body_timeout_s, float),
            header_timeout_s=_env("HEADER_TIMEOUT_S", d.header_timeout_s, float),
            warmup_iters=_env("WARMUP_ITERS", d.warmup_iters, int),
            triton_host=_env("TRITON_HOST", d.triton_host),
            triton_key=_env("TRITON_KEY", None),
            cpu_pinning=_env("CPU_PINNING", None),
            trt_cache=Path(_env("TRT_CACHE", str(d.trt_cache))),
            standin=_env("STANDIN", None),
            checks_strict=_env("CHECKS_STRICT", d.checks_strict, _flag),
            place=_env("PLACE", d.place),
            node_host=_env("NODE_HOST", d.node_host),
            node_hosts={n: h for n in NODE_ENDPOINTS if (h := _env(f"NODE_{n.upper()}_HOST", None))},
            node_ports={n: p for n in NODE_ENDPOINTS if (p := _env(f"NODE_{n.upper()}_PORT", None, int))},
            node_triton_model=_env("NODE_TRITON_MODEL", None),
            triton_url=_env("TRITON_URL", None),
            triton_grpc_url=_env("TRITON_GRPC_URL", None),
            triton_model=_env("TRITON_MODEL", None),
            triton_jpeg_model=_env("TRITON_JPEG_MODEL", None),
        )
        values.update({k: v for k, v in overrides.items() if v is not None})
        s = cls(**values)
        s.validate()
        return s

    def validate(self) -> None:
        word(Engine, self.engine, "engine")
        word(Provider, self.provider, "provider")
        word(Precision, self.precision, "precision")
        if self.precision != Precision.FP32 and self.engine != Engine.TORCH:
            raise InvalidValue(f"precision {self.precision} needs engine torch: the ONNX engines run the fp32 export")
        if self.decode not in DECODE_PLACES:
            raise InvalidValue(f"decode must be one of {', '.join(DECODE_PLACES)}, got {self.decode!r}")
        if self.pretrained and self.checkpoint:
            raise InvalidValue("set SERVELAB_PRETRAINED or SERVELAB_CHECKPOINT, not both")
        for name in ("max_batch", "max_queue", "max_images_per_request", "max_bytes", "max_pixels", "decode_threads",
                     "engine_instances", "max_body_bytes", "workers"):
            if getattr(self, name) < 1:
                raise InvalidValue(f"{name} must be >= 1")
        if self.body_timeout_s <= 0:
            raise InvalidValue("body_timeout_s must be > 0: a body that never arrives would hold its slot forever")
        if self.header_timeout_s <= 0:
            raise InvalidValue("header_timeout_s must be > 0: headers that never arrive would hold a connection forever")
        if self.emulated_devices < 0:
            raise InvalidValue("emulated_devices must be >= 0 (0 = the device profile's own count)")
        for name in ("max_in_flight", "request_timeout_s", "max_wait_ms", "always_admit"):
            if (getattr(self, name) or 0) < 0:
                raise InvalidValue(f"{name} must be >= 0 (0 = no limit)")

    @property
    def in_flight_limit(self) -> int:
        """Requests admitted at once (0: no limit); defaults to max_queue."""
        return self.max_queue if self.max_in_flight is None else self.max_in_flight

    def with_(self, **changes) -> Settings:
        return replace(self, **changes)

    def as_dict(self) -> dict:
        d = asdict(self)
        d["artifacts"] = str(self.artifacts)
        d["device_dir"] = str(self.device_dir)
        d["metrics_dir"] = str(self.metrics_dir)
        d["metrics_run_dir"] = str(self.metrics_run_dir) if self.metrics_run_dir else None
        d["trt_cache"] = str(self.trt_cache)
        d.pop("triton_key")  # a secret: never into a record, a log or a page
        return d
