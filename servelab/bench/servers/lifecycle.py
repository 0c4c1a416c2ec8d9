"""What a benchmark talks to: a typed handle on a running server. Experiments take one and never start servers.

Server kinds (the word for them in servelab.bench is *server*):

  fastapi      servelab's FastAPI service (payload jpeg | tensor), counters from its Prometheus /metrics
  litserve     the same engine behind LitServe (peer baseline; jpeg as base64 JSON | tensor)
  triton-http  the embedded tritonserver (tensor | jpeg via the ensemble), counters from Triton's statistics
  triton-grpc  idem over gRPC
  in-process   the engine in this process (raw compute, no serving layer)

Two ways to get a handle:

  with served("triton-grpc", payload="tensor") as srv:   # start one for the measurement (CLI, tests)
  srv = attach("triton-http", url, model=…)              # a server already running (the lab's stack, a node)

Every handle has `worker_factory(payload, batch)` for the load generator, `snapshot()` / `delta()` (the server's
own counters before/after a point), `params()` (JSON-safe settings for the record), `pid` (for RSS) and
`variant(payload=…, protocol=…)` (the same server, clients sending another payload / protocol). `TritonServed`
also holds the model state (instances, queue delay) and changes it with `reconfigure()` (a model reload).
"""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from servelab.triton.models import CPU_ENCODER, EMULATED_ENCODER, ENSEMBLE

SERVERS = ("fastapi", "litserve", "triton-http", "triton-grpc", "in-process")


@dataclass
class Served:
    """A running server and how to load it. Subclasses say how clients are made and counters read."""

    server: str
    engine: str
    url: str | None
    pid: int | None = None
    payload: str = "tensor"
    protocol: str = "http"
    startup_s: float | None = None
    settings: dict = field(default_factory=dict)  # JSON-safe settings (max_batch, …) for the record
    served_by: str = ""  # which machine answers (every record's params.served_by): see this_machine / attach

    @property
    def backend(self) -> str:
        return self.server

    def make_client(self):
        raise NotImplementedError

    def worker_factory(self, payload: str, batch: int):
        """Load-generator worker factory: each worker its own client sending `batch` images as `payload`."""
        from servelab.bench.inputs import sample_jpegs, sample_tensor
        from servelab.bench.loadgen import client_factory

        srv = self.variant(payload=payload) if payload != self.payload and payload != "json-lists" else self
        if payload in ("tensor", "json-lists"):
            return client_factory(srv.make_client, tensor=sample_tensor(batch))
        return client_factory(srv.make_client, blobs=list(sample_jpegs(batch)))

    def variant(self, *, payload: str | None = None, protocol: str | None = None) -> Served:
        if protocol not in (None, self.protocol):
            raise ValueError(f"{self.server} speaks {self.protocol} only")
        return dataclasses.replace(self, payload=payload or self.payload)

    def snapshot(self) -> dict | None:
        return None

    def delta(self, before: dict | None, after: dict | None) -> dict | None:
        return None

    def params(self) -> dict:
        scalars = {k: v for k, v in self.settings.items() if isinstance(v, (int, float, str, bool, type(None)))}
        return {**scalars, "served_by": self.served_by or None}


def this_machine() -> str:
    """served_by of a server this process started (and of the in-process engine): where the notebook runs."""
    from servelab.fingerprint import machine, machine_label

    return f"this machine ({machine_label(machine())})"


def reported_machine(url: str, netloc_of: str) -> str:
    """served_by of a running servelab service: the machine its /info reports about itself."""
    import httpx

    try:
        m = httpx.get(url.rstrip("/") + "/info", timeout=10).json().get("machine")
    except (httpx.HTTPError, ValueError, AttributeError):
        m = None
    from servelab.fingerprint import machine_label

    return machine_label(m) if isinstance(m, dict) else f"the {netloc_of} (its machine unreported)"


# --- servelab service ----------------------------------------------------------------------------------

def service_metrics(url: str) -> dict:
    """The servelab service's own counters, parsed with prometheus-client's parser."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(url.rstrip("/") + "/metrics", timeout=10).text
    out = {"requests": {}, "images": 0.0, "batch_buckets": {}, "batch_sum": 0.0, "batch_count": 0.0, "rejections": {}}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == "servelab_requests_total":
                out["requests"][f"{s.labels['endpoint']} {s.labels['status']}"] = s.value
            elif s.name == "servelab_images_total":
                out["images"] = s.value
            elif s.name == "servelab_batch_size_bucket":
                out["batch_buckets"][s.labels["le"]] = s.value
            elif s.name == "servelab_batch_size_sum":
                out["batch_sum"] = s.value
            elif s.name == "servelab_batch_size_count":
                out["batch_count"] = s.value
            elif s.name == "servelab_rejections_total":
                out["rejections"][s.labels["reason"]] = s.value
    return out


def service_delta(a: dict | None, b: dict | None) -> dict | None:
    """Before/after difference of service_metrics: requests by endpoint+status, executions, average batch, histogram."""
    if not a or not b:
        return None
    reqs = {k: int(v - a["requests"].get(k, 0)) for k, v in b["requests"].items() if v - a["requests"].get(k, 0)}
    execs = int(b["batch_count"] - a["batch_count"])
    hist, prev = {}, 0
    for le in sorted(b["batch_buckets"], key=lambda x: float("inf") if x == "+Inf" else float(x)):
        cum = int(b["batch_buckets"][le] - a["batch_buckets"].get(le, 0))
        if cum - prev:
            hist[f"<={le}"] = cum - prev
        prev = cum
    return {
        "source": "servelab /metrics",
        "requests": reqs,
        "requests_ok": sum(v for k, v in reqs.items() if k.endswith(" 200")),
        "images": int(b["images"] - a["images"]),
        "executions": execs,
        "avg_batch": round((b["batch_sum"] - a["batch_sum"]) / execs, 3) if execs else None,
        "batch_histogram": hist,
        "rejections": {k: int(v - a["rejections"].get(k, 0)) for k, v in b["rejections"].items()
                       if v - a["rejections"].get(k, 0)},
    }


@dataclass
class ServiceServed(Served):
    def make_client(self):
        from servelab.client import InferenceClient

        return InferenceClient(mode="remote", backend="fastapi", url=self.url, payload=self.payload)

    def snapshot(self) -> dict | None:
        return service_metrics(self.url)

    def delta(self, before, after):
        return service_delta(before, after)


@dataclass
class LitServed(Served):
    def make_client(self):
        from servelab.bench.litserve_server import LitServeClient

        return LitServeClient(self.url)


# --- Triton --------------------------------------------------------------------------------------------

def triton_delta(before: dict | None, after: dict | None) -> dict | None:
    """Triton's server-side breakdown for the requested model; executed batch sizes from the encoder."""
    if not before or not after:
        return None
    models = list(after)
    front, encoder = models[0], models[-1]
    s = (after[front] - before[front]).summary()
    enc = (after[encoder] - before[encoder]).summary()
    out = {"source": "triton /v2/models/<m>/stats", **{k: v for k, v in s.items() if k != "batch_hist"},
           "requests_ok": s["requests"], "images": s["inferences"],
           "batch_histogram": {str(k): v for k, v in enc["batch_hist"].items()},
           "encoder_executions": enc["executions"], "encoder_avg_batch": enc["avg_batch"]}
    if front != encoder:
        out["note"] = (f"{front} is an ensemble: its queue/compute figures span the whole pipeline "
                       f"(preprocess + encoder); the encoder's own are under server.encoder")
        out["encoder"] = {k: v for k, v in enc.items() if k != "batch_hist"}
        out["avg_batch"] = enc["avg_batch"]  # the ensemble's own count is per request; batching happens in the encoder
    return out


@dataclass
class TritonServed(Served):
    """A running Triton: both endpoints, the encoder and JPEG-ensemble names, and the encoder's loaded state."""

    http_url: str = ""
    grpc_url: str | None = None
    model: str = CPU_ENCODER                     # the encoder (tensor payload)
    jpeg_model: str = ENSEMBLE                   # the ensemble (jpeg payload)
    repository: Path | None = None
    instances: int | None = None
    max_queue_delay_us: int | None = None
    client_options: dict = field(default_factory=dict)
    gpus: list[int] | None = None  # the GPU ids the encoder's instances run on, as the server reports them

    @property
    def front_model(self) -> str:
        return self.jpeg_model if self.payload == "jpeg" else self.model

    def make_client(self):
        from servelab.client import InferenceClient

        url = self.http_url if self.protocol == "http" else self.grpc_url
        return InferenceClient(mode="remote", backend=f"triton-{self.protocol}", url=url, payload=self.payload,
                               model=self.model, jpeg_model=self.jpeg_model, **self.client_options)

    def variant(self, *, payload: str | None = None, protocol: str | None = None) -> TritonServed:
        protocol = protocol or self.protocol
        if protocol == "grpc" and not self.grpc_url:
            raise ValueError("no gRPC endpoint known for this Triton (attach it with grpc_url=…)")
        return dataclasses.replace(self, payload=payload or self.payload, protocol=protocol,
                                   server=f"triton-{protocol}")

    def snapshot(self) -> dict | None:
        from servelab.triton.server_stats import read_stats

        return {m: read_stats(self.http_url, m) for m in dict.fromkeys((self.front_model, self.model))}

    def delta(self, before, after):
        return triton_delta(before, after)

    def read_state(self) -> TritonServed:
        """Refresh instances / queue delay from what Triton actually loaded."""
        from servelab.triton.control import get_config

        cfg = get_config(self.http_url, self.model)
        self.max_queue_delay_us = int(cfg.get("dynamic_batching", {}).get("max_queue_delay_microseconds", 0))
        self.instances = sum(int(g.get("count", 1)) for g in cfg.get("instance_group", [])) or self.instances
        # Triton fills each GPU group's `gpus` with every GPU it sees: the server's own GPU count
        self.gpus = sorted({int(d) for g in cfg.get("instance_group", []) if g.get("kind") == "KIND_GPU"
                            for d in g.get("gpus", [])})
        return self

    def reconfigure(self, *, max_queue_delay_us: int | None = None, instances: int | None = None,
                    max_queue: int | None = None) -> None:
        """Reload the encoder with another queue delay, instance count and/or queue bound (repository API)."""
        from servelab.triton.control import reconfigure

        reconfigure(self.http_url, self.model, max_queue_delay_us=max_queue_delay_us, instances=instances,
                    max_queue=max_queue, repository=self.repository)
        self.read_state()

    @contextlib.contextmanager
    def configured(self, *, max_queue_delay_us: int | None = None, instances: int | None = None):
        """`with srv.configured(instances=2):` — the state inside, and the original state restored after."""
        original = {"max_queue_delay_us": self.max_queue_delay_us, "instances": self.instances}
        want = {k: v for k, v in (("max_queue_delay_us", max_queue_delay_us), ("instances", instances))
                if v is not None}
        self.reconfigure(**want)
        try:
            yield self
        finally:
            self.reconfigure(**{k: original[k] for k in want if original[k] is not None})

    def params(self) -> dict:
        return {**super().params(), "model": self.front_model, "instances": self.instances,
                "max_queue_delay_us": self.max_queue_delay_us}


class TritonJsonClient:
    """Triton HTTP with the input as JSON number lists (binary_data=False): the slow format, measured on purpose."""

    def __init__(self, http_url: str, model: str):
        import tritonclient.http as tc

        from servelab.triton.control import address

        self.tc, self.model = tc, model
        self.client = tc.InferenceServerClient(address(http_url), concurrency=1)

    def embed_tensor(self, batch):
        tc = self.tc
        inp = tc.InferInput("pixel_values", list(batch.shape), "FP32")
        inp.set_data_from_numpy(batch, binary_data=False)
        res = self.client.infer(self.model, [inp], outputs=[tc.InferRequestedOutput("embedding", binary_data=True)])
        return res.as_numpy("embedding")

    def close(self):
        self.client.close()


@dataclass
class TritonJsonServed(TritonServed):
    """Triton HTTP sent JSON number lists (payload json-lists) — only for the payload experiment."""

    def make_client(self):
        return TritonJsonClient(self.http_url, self.model)


# --- in-process engine -------------------------------------------------------------------------------

@dataclass
class InProcess(Served):
    """The engine in this process: raw compute, the baseline a served figure is divided by."""

    embedder: object = None

    def worker_factory(self, payload: str, batch: int):
        from servelab.bench.inputs import sample_tensor
        from servelab.bench.loadgen import embedder_factory

        if payload != "tensor":
            raise ValueError("in-process measures the engine on tensors only")
        return embedder_factory(self.embedder, sample_tensor(batch))

    def make_client(self):
        raise TypeError("in-process has no client: use worker_factory")

    def params(self) -> dict:
        return {"threads": getattr(self.embedder, "threads", None), "provider": getattr(self.embedder, "provider", None),
                "served_by": self.served_by or None}


def make_embedder(engine: str, provider: str = "cpu", threads: int = 0):
    from servelab.config import Settings
    from servelab.model.engines import make_embedder as _make

    return _make(Settings.from_env(), engine=engine, provider=provider, threads=threads or None)


# --- attach: a server that is already running ---------------------------------------------------------

# In every record measured on an attached server: the lab's own stack, not one a notebook started for a comparison.
ATTACHED = {"attached": True}


def attach(server: str, url: str, *, payload: str = "tensor", engine: str | None = None, pid: int | None = None,
           model: str | None = None, jpeg_model: str | None = None, http_url: str | None = None,
           grpc_url: str | None = None) -> Served:
    """A handle on a running server (this lab run's stack, or a node's compose stack).

    Triton: give `url` for the protocol chosen; the other endpoint (`http_url` / `grpc_url`) enables
    `variant(protocol=…)`; statistics and reloads always go over HTTP, so a gRPC handle needs `http_url`.
    """
    netloc = urlsplit(url if "//" in url else f"//{url}").netloc
    here = this_machine() if pid else None  # a pid: this run started it, on this machine's loopback
    if server == "fastapi":
        if engine is None:
            engine = _service_engine(url)
        return ServiceServed(server="fastapi", engine=engine or "?", url=url, pid=pid, payload=payload,
                             settings=dict(ATTACHED), served_by=here or reported_machine(url, f"service at {netloc}"))
    if server == "litserve":
        return LitServed(server="litserve", engine=engine or "onnx", url=url, pid=pid, payload=payload,
                         settings=dict(ATTACHED), served_by=here or f"the LitServe server at {netloc}")
    if server in ("triton-http", "triton-grpc"):
        protocol = server.split("-")[1]
        h = http_url or (url if protocol == "http" else None)
        g = grpc_url or (url if protocol == "grpc" else None)
        if not h:
            raise ValueError("a gRPC Triton handle needs http_url= too (statistics and reloads use HTTP)")
        names = {k: v for k, v in (("model", model), ("jpeg_model", jpeg_model)) if v}
        srv = TritonServed(server=server, engine=engine or "onnx", url=url, pid=pid, payload=payload,
                           protocol=protocol, http_url=h, grpc_url=g, settings=dict(ATTACHED), **names)
        with contextlib.suppress(Exception):
            srv.read_state()
        srv.served_by = here or triton_machine(netloc, srv.gpus)
        return srv
    raise ValueError(f"server must be one of fastapi, litserve, triton-http, triton-grpc, got {server!r}")


def triton_machine(netloc: str, gpus: list[int] | None) -> str:
    """served_by of a Triton this run did not start: Triton names no host, but its loaded config names its GPUs."""
    on = "its machine unreported" if gpus is None else (f"{len(gpus)} GPU(s)" if gpus else "no GPU instances")
    return f"the Triton server at {netloc} ({on})"


def _service_engine(url: str) -> str | None:
    import httpx

    try:
        engine = httpx.get(url.rstrip("/") + "/info", timeout=10).json().get("engine")
        return engine.get("engine") if isinstance(engine, dict) else engine
    except (httpx.HTTPError, ValueError, AttributeError):
        return None


# --- served: start a server for a measurement ----------------------------------------------------------

@contextlib.contextmanager
def serve_fastapi(engine: str = "onnx", *, payload: str = "tensor", max_batch: int = 16, max_delay_ms: float = 2.0,
                  max_queue: int = 512, threads: int = 0, log_path: Path | None = None, env: dict | None = None):
    from servelab.service.process import ServiceProcess

    env = {"SERVELAB_ENGINE": engine, "SERVELAB_MAX_BATCH": max_batch, "SERVELAB_MAX_DELAY_MS": max_delay_ms,
           "SERVELAB_MAX_QUEUE": max_queue, "SERVELAB_THREADS": threads, **(env or {})}
    t0 = time.perf_counter()
    with ServiceProcess(env=env, log_path=log_path) as svc:
        yield ServiceServed(server="fastapi", engine=engine, url=svc.url, pid=svc.proc.pid, payload=payload,
                            startup_s=time.perf_counter() - t0, served_by=this_machine(),
                            settings={"max_batch": max_batch, "max_delay_ms": max_delay_ms, "max_queue": max_queue})


@contextlib.contextmanager
def serve_litserve(engine: str = "onnx", *, payload: str = "jpeg", max_batch: int = 16, batch_timeout: float = 0.002,
                   log_path: Path | None = None):
    from servelab.bench.litserve_server import LitServeProcess

    t0 = time.perf_counter()
    with LitServeProcess(engine=engine, max_batch=max_batch, batch_timeout=batch_timeout, log_path=log_path) as srv:
        yield LitServed(server="litserve", engine=engine, url=srv.url, pid=srv.pid, payload=payload,
                        startup_s=time.perf_counter() - t0, served_by=this_machine(),
                        settings={"max_batch": max_batch, "batch_timeout_s": batch_timeout})


@contextlib.contextmanager
def serve_triton(protocol: str = "http", *, payload: str = "tensor", instances: int = 1,
                 max_delay_us: int | None = None, max_batch: int | None = None, threads: int | None = None,
                 engine: str = "onnx", log_path: Path | None = None, repository: Path | None = None,
                 device: str = "cpu"):
    """Stage a CPU repository into a temporary folder and run the embedded tritonserver on free ports (`device`
    cuda: the python-backend encoder on KIND_GPU with ONNX Runtime's CUDA provider)."""
    from servelab.config import Settings
    from servelab.triton.repository import stage
    from servelab.triton.server import EmbeddedTriton

    if engine not in ("onnx", "emulated"):
        raise ValueError(f"the embedded Triton CPU repository serves the fp32 ONNX graph (engine onnx) and an "
                         f"emulated accelerator (engine emulated); engine {engine!r} is not staged")
    tmp = None
    if repository is None:
        tmp = Path(tempfile.mkdtemp(prefix="servelab-bench-triton-"))
        repository = tmp / "models"
    try:
        t0 = time.perf_counter()
        info = stage("cpu", repository, instances=instances, max_delay_us=max_delay_us, max_batch=max_batch,
                     threads=threads, settings=Settings.from_env(), device=device)
        stage_s = time.perf_counter() - t0
        t1 = time.perf_counter()
        with EmbeddedTriton(repository, log_path=log_path) as tri:
            srv = TritonServed(server=f"triton-{protocol}", engine=engine,
                               url=tri.http_url if protocol == "http" else tri.grpc_url, pid=tri.pid, payload=payload,
                               protocol=protocol, startup_s=time.perf_counter() - t1, http_url=tri.http_url,
                               grpc_url=tri.grpc_url, model=EMULATED_ENCODER if engine == "emulated" else CPU_ENCODER, jpeg_model=ENSEMBLE, repository=repository,
                               instances=instances, max_queue_delay_us=max_delay_us, served_by=this_machine(),
                               settings={"intra_op_threads": info.get("threads"), "stage_s": round(stage_s, 3),
                                         "server_build": "embedded tritonserver (python backend, onnxruntime "
                                                         f"{'CUDA' if device == 'cuda' else 'CPU'})"})
            with contextlib.suppress(Exception):
                srv.read_state()
            yield srv
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def serve_in_process(engine: str = "onnx", *, provider: str = "cpu", threads: int = 0, **_unused):
    import gc

    t0 = time.perf_counter()
    emb = make_embedder(engine, provider, threads)
    try:
        yield InProcess(server="in-process", engine=emb.engine, url=None, pid=None, payload="tensor",
                        protocol="inproc", startup_s=time.perf_counter() - t0, embedder=emb,
                        served_by=this_machine())
    finally:
        del emb
        gc.collect()


def served(server: str, engine: str = "onnx", **kwargs):
    """Start `server` for a measurement and stop it afterwards: a context manager yielding its handle.

    Keyword arguments go to the server (payload, max_batch, instances, max_delay_us, threads, log_path, …).
    """
    if server == "fastapi":
        return _labelled(serve_fastapi(engine, **kwargs))
    if server == "litserve":
        return serve_litserve(engine, **kwargs)
    if server in ("triton-http", "triton-grpc"):
        return _labelled(serve_triton(protocol=server.split("-")[1], engine=engine, **kwargs))
    if server == "in-process":
        return serve_in_process(engine, **kwargs)
    raise ValueError(f"server must be one of {', '.join(SERVERS)}, got {server!r}")


@contextlib.contextmanager
def _labelled(serving):
    """The handle `serving` yields, whose records name the emulated device (settings["device"], "emulated <profile>")
    when its engine is the emulated accelerator: no figure measured on it may pass for a model's."""
    with serving as srv:
        if srv.engine == "emulated":
            srv.settings["device"] = emulated_device(srv)
        yield srv


def emulated_device(srv: Served) -> str:
    """The label of the emulated device behind a server's handle: the service's /info, or Triton's weights label
    of the emulated model. (In-process, the engine's provider is that label.)"""
    if isinstance(srv, TritonServed):
        from servelab.triton.control import get_config

        return get_config(srv.http_url, srv.model)["parameters"]["weights"]["string_value"]
    import httpx

    return httpx.get(srv.url.rstrip("/") + "/info", timeout=10).json()["engine"]["device"]
