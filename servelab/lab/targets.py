"""Where the notebooks send their requests: `local` (the embedded stack this run starts on loopback) or `gpu`
(the compose stacks already running on a GPU node).

The notebooks only ever see URLs; they do not care whether a server is a subprocess here or a container on a
node. For `gpu`, the host and ports come from the environment (SERVELAB_GPU_HOST, SERVELAB_GPU_*_PORT), or
`--param service_url=…` etc., and default to the ports the compose stacks publish on the node itself (the
node's Jupyter container, or an SSH tunnel from here: `ssh -L 8000:127.0.0.1:8000 … cc@<floating-ip>`).
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass

TARGETS = ("local", "gpu")



@dataclass(frozen=True)
class Endpoints:
    service_url: str
    triton_http_url: str
    triton_grpc_url: str  # host:port (gRPC has no scheme)
    triton_metrics_url: str

    def as_params(self) -> dict:
        return asdict(self)


def gpu_endpoints() -> Endpoints:
    """Ports published by docker/compose.*.yaml on the node (servelab.provision.NODE_PORTS)."""
    from servelab.provision import NODE_PORTS

    host = os.environ.get("SERVELAB_GPU_HOST", "127.0.0.1")

    def port(name: str) -> int:
        raw = os.environ.get(f"SERVELAB_GPU_{name.upper()}_PORT")
        return int(raw) if raw else NODE_PORTS[name]

    return Endpoints(
        service_url=f"http://{host}:{port('service')}",
        triton_http_url=f"http://{host}:{port('triton_http')}",
        triton_grpc_url=f"{host}:{port('triton_grpc')}",
        triton_metrics_url=f"http://{host}:{port('triton_metrics')}/metrics",
    )


def check_target(target: str) -> str:
    if target not in TARGETS:
        raise ValueError(f"target must be one of {', '.join(TARGETS)}, got {target!r}")
    return target


def triton_models(target: str) -> dict:
    """The encoder and JPEG-ensemble model names the Triton server of `target` serves."""
    from servelab.triton.repository import CPU_ENCODER, ENSEMBLE, GPU_ENCODER

    return {"triton_model": CPU_ENCODER if target == "local" else GPU_ENCODER, "triton_jpeg_model": ENSEMBLE}


def attach(backend: str, url: str, *, payload: str = "tensor", engine: str | None = None, pid: int | None = None,
           model: str | None = None, jpeg_model: str | None = None, stats_url: str | None = None):
    """A bench `Served` for a server that is already running (this run's stack, or a node's compose stack),
    so the bench's measurement functions can be pointed at it: fresh client per worker, and the server's own
    counters (servelab /metrics, or Triton's statistics read over HTTP at `stats_url`) as before/after deltas.
    """
    from servelab.bench.targets import Served, service_delta, service_metrics
    from servelab.client import InferenceClient

    if backend == "fastapi":
        import httpx

        if engine is None:
            try:
                engine = httpx.get(url.rstrip("/") + "/info", timeout=10).json().get("engine")
                engine = engine.get("engine") if isinstance(engine, dict) else engine
            except (httpx.HTTPError, ValueError, AttributeError):
                engine = None
        return Served(target="fastapi", backend="fastapi", protocol="http", engine=engine or "?", url=url, pid=pid,
                      make_client=lambda: InferenceClient(mode="remote", backend="fastapi", url=url, payload=payload),
                      snapshot=lambda: service_metrics(url), delta=service_delta, extra={"attached": True})
    if backend in ("triton-http", "triton-grpc"):
        from servelab.bench.triton_targets import triton_delta
        from servelab.triton.stats import read_stats

        names = {k: v for k, v in (("model", model), ("jpeg_model", jpeg_model)) if v}
        front = (jpeg_model or "openclip_vit_b32_jpeg") if payload == "jpeg" else model
        stats_at = stats_url or (url if backend == "triton-http" else None)
        counted = tuple(dict.fromkeys(m for m in (front, model) if m))  # requested model first, encoder last
        snap = (lambda: {m: read_stats(stats_at, m) for m in counted}) if stats_at and counted else (lambda: None)
        return Served(target=backend, backend=backend, protocol=backend.split("-")[1], engine=engine or "onnx",
                      url=url, pid=pid,
                      make_client=lambda: InferenceClient(mode="remote", backend=backend, url=url, payload=payload, **names),
                      snapshot=snap, delta=triton_delta, extra={"attached": True, "model": front})
    raise ValueError(f"backend must be fastapi, triton-http or triton-grpc, got {backend!r}")
