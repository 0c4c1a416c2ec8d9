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
           model: str | None = None, jpeg_model: str | None = None, stats_url: str | None = None,
           grpc_url: str | None = None):
    """A bench server handle (servelab.bench.servers) for a server that is already running (this run's stack,
    or a node's compose stack). Triton over gRPC needs `stats_url` (its HTTP endpoint: statistics, reloads)."""
    from servelab.bench.servers import attach as bench_attach

    return bench_attach(backend, url, payload=payload, engine=engine, pid=pid, model=model, jpeg_model=jpeg_model,
                        http_url=stats_url, grpc_url=grpc_url)
