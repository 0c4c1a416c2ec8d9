"""Where the lab's servers run — the *place*: `local` (the embedded stack a lab run starts on this machine's
loopback, or `make serve` + `make triton-up` when working interactively) or `node` (a GPU node running the
docker-compose stacks in docker/).

The notebooks only ever see URLs and model names. A notebook's parameters cell leaves them empty ("" = this
place's default); its first code cell calls `place_defaults(globals())`, which fills every empty one for the
place, so a notebook given only `place=node` (plain papermill, or opened in the node's JupyterLab, where
SERVELAB_PLACE=node) talks to the node's stacks with the GPU model names and writes to results/interactive.
For `node`, host and ports come from SERVELAB_NODE_HOST and SERVELAB_NODE_{SERVICE,TRITON_HTTP,TRITON_GRPC,
TRITON_METRICS}_PORT (SERVELAB_NODE_<NAME>_HOST puts one endpoint on another machine), default: the ports
the compose stacks publish on the node's loopback (reached from the node itself, or from here through an SSH
tunnel: `ssh -L 8000:127.0.0.1:8000 … cc@<floating-ip>`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from servelab.config import Settings
from servelab.vocabulary import Place, Provider, word


@dataclass(frozen=True)
class Endpoints:
    service_url: str
    triton_http_url: str
    triton_grpc_url: str  # host:port (gRPC has no scheme)
    triton_metrics_url: str

    def as_params(self) -> dict:
        return asdict(self)


def local_endpoints() -> Endpoints:
    """The default loopback ports of `make serve` and `make triton-up` (a lab run passes its own stack's)."""
    from servelab.config import SERVICE_PORT, TRITON_GRPC_PORT, TRITON_HTTP_PORT, TRITON_METRICS_PORT

    return Endpoints(
        service_url=f"http://127.0.0.1:{SERVICE_PORT}",
        triton_http_url=f"http://127.0.0.1:{TRITON_HTTP_PORT}",
        triton_grpc_url=f"127.0.0.1:{TRITON_GRPC_PORT}",
        triton_metrics_url=f"http://127.0.0.1:{TRITON_METRICS_PORT}/metrics",
    )


def node_endpoints(settings: Settings | None = None) -> Endpoints:
    """Ports published by docker/compose.*.yaml on the node (servelab.provision.NODE_PORTS), unless the settings
    (SERVELAB_NODE_*) name others."""
    from servelab.provision import NODE_PORTS

    s = settings or Settings.from_env()

    def address(name: str) -> str:
        """host:port of one endpoint; SERVELAB_NODE_<NAME>_HOST puts it on another machine than the rest."""
        return f"{s.node_hosts.get(name) or s.node_host}:{s.node_ports.get(name) or NODE_PORTS[name]}"

    return Endpoints(
        service_url=f"http://{address('service')}",
        triton_http_url=f"http://{address('triton_http')}",
        triton_grpc_url=address("triton_grpc"),
        triton_metrics_url=f"http://{address('triton_metrics')}/metrics",
    )


def check_place(place: str) -> Place:
    return word(Place, place, "place")


def default_place(settings: Settings | None = None) -> str:
    """SERVELAB_PLACE (the node's Jupyter containers set `node`), else `local`."""
    return check_place((settings or Settings.from_env()).place or Place.LOCAL)


def triton_models(place: str, settings: Settings | None = None) -> dict:
    """The encoder and JPEG-ensemble model names the Triton server at `place` serves."""
    from servelab.triton.models import CPU_ENCODER, ENSEMBLE, GPU_ENCODER

    if place == Place.LOCAL:
        return {"triton_model": CPU_ENCODER, "triton_jpeg_model": ENSEMBLE}
    # SERVELAB_NODE_TRITON_MODEL: the node's encoder when it is not the GPU one (the CPU rehearsal's stand-in Triton)
    node_model = (settings or Settings.from_env()).node_triton_model
    return {"triton_model": node_model or GPU_ENCODER, "triton_jpeg_model": ENSEMBLE}


def interactive_out_dir() -> Path:
    """results/interactive of this checkout: writable wherever the notebook runs (here, the node's containers)."""
    from servelab.config import results_dir

    return results_dir() / "interactive"


def place_defaults(namespace: dict) -> dict:
    """Values for the parameters a notebook left empty, for its place: `globals().update(place_defaults(globals()))`.

    Reads `place` ("" = default_place()) and fills `out_dir` and any endpoint or model-name parameter the
    notebook declares with "" — the ones a run passed explicitly are kept.
    """
    place = check_place(namespace.get("place") or default_place())
    endpoints = local_endpoints() if place == Place.LOCAL else node_endpoints()
    values = {"out_dir": str(interactive_out_dir()), **endpoints.as_params(), **triton_models(place)}
    filled = {k: v for k, v in values.items() if k in namespace and namespace[k] in ("", None)}
    return {"place": place, **filled}


def in_process_check(engine: str = "onnx"):
    """Whether this kernel can run `engine` on CUDA, decided by a computation that ran (servelab.model.providers):
    CUDA torch for torch, onnxruntime's CUDA provider otherwise. onnxruntime-gpu lists CUDA without a usable
    GPU, and torch.cuda.is_available() says nothing of a driver that fails on the first kernel."""
    from servelab.model.providers import provider_check, torch_cuda_check

    return torch_cuda_check() if engine == "torch" else provider_check("cuda")


def in_process_provider(place: str, engine: str = "onnx") -> str:
    """The provider in-process rows of `engine` should use at `place`: the node's GPU ("cuda") when this kernel
    can run on it; at `local`, the GPU only when the run asked for it (`servelab lab run --device cuda`, i.e.
    SERVELAB_PROVIDER=cuda) and it can run; else "cpu" — callers say so with `in_process_note`."""
    if place != Place.NODE:
        from servelab.config import Settings

        if Settings.from_env().provider == "cpu":
            return "cpu"
    return "cuda" if in_process_check(engine).usable else "cpu"


def in_process_note(step, place: str, provider: str, rows: str, engine: str | None = None) -> None:
    """At place=node, state plainly when in-process rows did not run on the node's GPU, and why (the reason of
    `engine`'s check; without an engine, the reasons of torch's and onnxruntime's)."""
    if place == Place.NODE and provider != Provider.CUDA:
        engines = [engine] if engine else ["torch", "onnx"]
        reasons = "; ".join(f"{e}: {in_process_check(e).reason or 'usable'}" for e in engines)
        step.not_run(f"{rows} on the node's GPU",
                     f"this kernel cannot run them on CUDA ({reasons}): those rows ran in-process on this machine's "
                     "CPU, only the servers' rows are the node's",
                     "run the notebook in the node's JupyterLab (docker/compose.jupyter.yaml)")


def attach(backend: str, url: str, *, payload: str = "tensor", engine: str | None = None, pid: int | None = None,
           model: str | None = None, jpeg_model: str | None = None, stats_url: str | None = None,
           grpc_url: str | None = None):
    """A bench server handle (servelab.bench.servers) for a server that is already running (this run's stack,
    or a node's compose stack). Triton over gRPC needs `stats_url` (its HTTP endpoint: statistics, reloads)."""
    from servelab.bench.servers import attach as bench_attach

    return bench_attach(backend, url, payload=payload, engine=engine, pid=pid, model=model, jpeg_model=jpeg_model,
                        http_url=stats_url, grpc_url=grpc_url)
