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
