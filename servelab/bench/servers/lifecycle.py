"""Getting a handle: `served(...)` starts a server for a measurement and stops it after; `attach(...)` points at
one already running (the lab's stack, a node).

    with served("triton-grpc", payload="tensor") as srv: …
    srv = attach("triton-http", url, model=…)
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

from servelab.bench.servers.handle import Served, reported_machine, this_machine
from servelab.bench.servers.in_process import InProcess, make_embedder
from servelab.bench.servers.service_served import LitServed, ServiceServed, service_engine
from servelab.bench.servers.triton_served import TritonServed, triton_machine
from servelab.errors import InvalidValue
from servelab.triton.models import CPU_ENCODER, EMULATED_ENCODER, ENSEMBLE
from servelab.vocabulary import Server

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
            engine = service_engine(url)
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
            raise InvalidValue("a gRPC Triton handle needs http_url= too (statistics and reloads use HTTP)")
        names = {k: v for k, v in (("model", model), ("jpeg_model", jpeg_model)) if v}
        srv = TritonServed(server=server, engine=engine or "onnx", url=url, pid=pid, payload=payload,
                           protocol=protocol, http_url=h, grpc_url=g, settings=dict(ATTACHED), **names)
        with contextlib.suppress(Exception):
            srv.read_state()
        srv.served_by = here or triton_machine(netloc, srv.gpus)
        return srv
    raise InvalidValue(f"server must be one of fastapi, litserve, triton-http, triton-grpc, got {server!r}")


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
    from servelab.bench.servers.litserve_server import LitServeProcess

    t0 = time.perf_counter()
    with LitServeProcess(engine=engine, max_batch=max_batch, batch_timeout=batch_timeout, log_path=log_path) as srv:
        yield LitServed(server="litserve", engine=engine, url=srv.url, pid=srv.pid, payload=payload,
                        startup_s=time.perf_counter() - t0, served_by=this_machine(),
                        settings={"max_batch": max_batch, "batch_timeout_s": batch_timeout})


@contextlib.contextmanager
def serve_triton(protocol: str = "http", *, payload: str = "tensor", instances: int = 1,
                 max_delay_us: int | None = None, max_batch: int | None = None, threads: int | None = None,
                 engine: str = "onnx", log_path: Path | None = None, repository: Path | None = None,
                 device: str = "cpu", precision: str | None = None):
    """Stage a CPU repository into a temporary folder and run the embedded tritonserver on free ports (`device`
    cuda: the python-backend encoder on KIND_GPU with ONNX Runtime's CUDA provider; `engine` torch: servelab's
    torch engine in that encoder instead of the ONNX export)."""
    from servelab.config import Settings
    from servelab.triton.repository import stage
    from servelab.triton.server import EmbeddedTriton

    if engine not in ("onnx", "torch", "emulated"):
        raise InvalidValue(f"the embedded Triton CPU repository serves the fp32 ONNX graph (engine onnx), servelab's "
                           f"torch engine (engine torch) and an emulated accelerator (engine emulated); engine {engine!r} "
                           "is not staged")
    tmp = None
    if repository is None:
        tmp = Path(tempfile.mkdtemp(prefix="servelab-bench-triton-"))
        repository = tmp / "models"
    try:
        t0 = time.perf_counter()
        info = stage("cpu", repository, instances=instances, max_delay_us=max_delay_us, max_batch=max_batch,
                     threads=threads, settings=Settings.from_env(**({"precision": precision} if precision else {})),
                     device=device,
                     engine="torch" if engine == "torch" else "onnx")
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
    startable = [s for s in Server if s != Server.FASTAPI_NO_ADMISSION]  # that one: servelab.bench.experiments.overload
    raise InvalidValue(f"server must be one of {', '.join(startable)}, got {server!r}")


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
