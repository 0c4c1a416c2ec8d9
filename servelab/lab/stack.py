"""The local stack for `place=local`: the FastAPI service and the embedded tritonserver on loopback.

One stack serves every notebook of a run (starting servers per notebook would cost more than the smoke
notebooks themselves). It is built only from other packages' public pieces: `ensure_exported` (model),
`ServiceProcess` (service), and the Triton package's staging and embedded-server context manager.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from servelab.config import TRITON_GRPC_PORT, TRITON_HTTP_PORT, TRITON_METRICS_PORT, Settings
from servelab.errors import CannotRun, InvalidValue
from servelab.lab.places import Endpoints
from servelab.netutil import free_port, port_in_use

PORT_POLICIES = ("auto", "configured", "free")


def pick_port(configured: int, policy: str, taken: set[int]) -> int:
    """configured: that port or an error; free: any free loopback port; auto: configured if free, else any."""
    if policy not in PORT_POLICIES:
        raise InvalidValue(f"ports must be one of {', '.join(PORT_POLICIES)}, got {policy!r}")
    if policy != "free" and configured not in taken and not port_in_use(configured):
        port = configured
    elif policy == "configured":
        raise CannotRun(f"port {configured} on 127.0.0.1 is in use; stop what holds it or use --ports free")
    else:
        port = free_port()
        while port in taken:
            port = free_port()
    taken.add(port)
    return port


# On the GPU the lab's batches reach 256 (the gpu profile): Triton's and the service's limits follow.
GPU_MAX_BATCH = 256


def service_env(device: str) -> dict:
    """The service's limits on the GPU: batches and requests of up to GPU_MAX_BATCH images, a queue for 128
    clients; on the CPU, the settings as they are."""
    if device != "cuda":
        return {}
    return {"SERVELAB_MAX_BATCH": GPU_MAX_BATCH, "SERVELAB_MAX_IMAGES": GPU_MAX_BATCH,
            "SERVELAB_MAX_QUEUE": 4 * GPU_MAX_BATCH}


def stack_device(settings: Settings) -> str:
    """Where the stack's engines run: cpu, or cuda when the settings' provider asks for the GPU (`servelab lab run
    --device cuda` sets it): the service on that provider, Triton's python-backend encoder on
    KIND_GPU with onnxruntime's CUDA provider. Refused before anything starts where CUDA cannot run."""
    if settings.provider == "cpu":
        return "cpu"
    from servelab.model.providers import provider_check, torch_cuda_check

    checks = [provider_check("cuda")] + ([torch_cuda_check()] if settings.engine == "torch" else [])
    reasons = [f"{c.reason}" for c in checks if not c.usable]
    if reasons:
        raise CannotRun(f"the stack cannot run on the GPU here: {'; '.join(reasons)} — run on the CPU (no --device "
                        "cuda, SERVELAB_PROVIDER=cpu) or on a GPU machine with onnxruntime-gpu")
    return "cuda"


@dataclass
class StackInfo:
    endpoints: Endpoints
    triton_repository: str
    weights: str
    logs: dict
    pids: dict


@contextlib.contextmanager
def local_stack(run_dir: Path, ports: str = "auto", say: Callable[[str], None] = print,
                settings: Settings | None = None) -> Iterator[StackInfo]:
    """Export (if needed), stage the Triton repository into <run_dir>/models (the notebooks reconfigure it
    live, so a run never edits the shared models/), start service + tritonserver; stop both on exit. `settings`
    (default: from the environment) choose the model and where the engines run."""
    from servelab.model.export import ensure_exported
    from servelab.service.process import ServiceProcess
    from servelab.triton.repository import stage
    from servelab.triton.server import EmbeddedTriton

    settings = settings or Settings.from_env()
    log_dir = Path(run_dir) / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    say("exporting the model (skipped when artifacts/ is up to date)")
    meta = ensure_exported(settings)
    say(f"model: {meta['path']} (weights: {meta['weights']})")
    device = stack_device(settings)
    repo = stage("cpu", out=Path(run_dir) / "models", settings=settings, device=device,
                 max_batch=GPU_MAX_BATCH if device == "cuda" else None)["repository"]
    say(f"staged the embedded Triton repository in {repo} (encoder on {device})")

    taken: set[int] = set()
    wanted = {"service": settings.port, "Triton HTTP": TRITON_HTTP_PORT, "Triton gRPC": TRITON_GRPC_PORT,
              "Triton metrics": TRITON_METRICS_PORT}
    got = {name: pick_port(port, ports, taken) for name, port in wanted.items()}
    moved = [f"{name} {wanted[name]} -> {got[name]}" for name in wanted if got[name] != wanted[name]]
    if moved and ports == "auto":
        say(f"configured ports in use, using free ones instead: {', '.join(moved)}")
    service_port, http_port, grpc_port, metrics_port = got.values()

    logs = {"service": str(log_dir / "service.log"), "triton": str(log_dir / "tritonserver.log")}
    say(f"starting the FastAPI service on 127.0.0.1:{service_port} (log {logs['service']})")
    service = {"SERVELAB_PROVIDER": settings.provider, **service_env(device)}
    with ServiceProcess(port=service_port, log_path=Path(logs["service"]), env=service) as svc:
        say(f"starting tritonserver on 127.0.0.1:{http_port}/{grpc_port}/{metrics_port} (log {logs['triton']})")
        with EmbeddedTriton(repository=repo, http_port=http_port, grpc_port=grpc_port,
                            metrics_port=metrics_port, log_path=Path(logs["triton"])) as tri:
            endpoints = Endpoints(service_url=svc.url, triton_http_url=tri.http_url,
                                  triton_grpc_url=tri.grpc_url, triton_metrics_url=tri.metrics_url)
            say("stack ready: service, Triton HTTP, gRPC and metrics on loopback")
            yield StackInfo(endpoints=endpoints, triton_repository=str(repo), weights=meta["weights"], logs=logs,
                            pids={"service": svc.proc.pid, "triton": tri.pid or 0})
        say("stopped tritonserver")
    say("stopped the service")
