"""`servelab triton …`: stage the repository, run the embedded server (up / down / status), reconfigure, stats.

`up` starts tritonserver in its own session (it outlives the command), waits until every model is ready, and
records pid, ports, repository and log in build/triton/server.json (SERVELAB_TRITON_STATE_DIR moves it); `down`
reads it and stops the server's process group (SIGTERM, then SIGKILL after --timeout). The server binds
SERVELAB_TRITON_HOST (127.0.0.1 unless set), never the service's SERVELAB_HOST, and its model control answers
only this start's key (servelab.triton.access), which `key` prints. Expected failures print
one line (`error: …`) and exit 1 via servelab.cli.main.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

from servelab.config import TRITON_GRPC_PORT, TRITON_HTTP_PORT, TRITON_METRICS_PORT, triton_state_dir, workspace
from servelab.errors import CannotRun
from servelab.fileio import atomic_write
from servelab.triton.models import CPU_ENCODER

app = typer.Typer(no_args_is_help=True)

def _state_file() -> Path:
    return triton_state_dir() / "server.json"


def _read_state() -> dict | None:
    try:
        return json.loads(_state_file().read_text())
    except (OSError, ValueError):
        return None


def _write_state(state: dict) -> None:
    atomic_write(_state_file(), json.dumps(state, indent=2))


@app.command()
def stage(
    flavour: str = typer.Option("cpu", help="cpu (embedded python-backend server) | gpu (NVIDIA container, onnxruntime backend)"),
    out: Path = typer.Option(workspace() / "models", help="live repository to write (replaced atomically)"),
    instances: int = typer.Option(1, help="encoder instances (CPU: count; GPU: count per listed GPU)"),
    max_delay_us: int | None = typer.Option(None, help="dynamic batching max_queue_delay_microseconds (default: template's)"),
    max_batch: int | None = typer.Option(None, help="max_batch_size of every model (default: template's)"),
    threads: int | None = typer.Option(None, help="onnxruntime threads per CPU instance (default: cores // instances)"),
    gpus: str = typer.Option("", help="GPU ids for the GPU encoders, comma-separated (default: none named = every GPU the server sees)"),
    trt_cache: str = typer.Option("/trt_cache", help="TensorRT engine + timing cache folder (a mounted volume)"),
    device: str = typer.Option("cpu", help="cpu flavour only: cpu | cuda (the python-backend encoder on KIND_GPU instances, onnxruntime's CUDA provider)"),
    servelab_path: str | None = typer.Option(
        None, help="where the servelab package lives for preprocess_jpeg inside the server (e.g. /opt/servelab in the container; default: the folder this servelab is imported from)"),
    uint8: bool = typer.Option(False, help="cpu flavour: also stage each encoder's uint8 variant (<encoder>_uint8), for clients that send uint8 pixels"),
):
    """Write Triton's live model repository from the templates in servelab/triton/staging/<flavour> (exports the ONNX model if needed)."""
    from servelab.triton.repository import stage as do_stage

    gpu_list = [int(g) for g in gpus.split(",") if g.strip()] if gpus else None
    try:
        info = do_stage(flavour, out, instances=instances, max_delay_us=max_delay_us, max_batch=max_batch,
                        threads=threads, gpus=gpu_list, trt_cache=trt_cache, servelab_path=servelab_path,
                        log_fn=typer.echo, device=device, uint8=uint8)
    except FileExistsError as exc:
        raise CannotRun(str(exc)) from None
    typer.echo(json.dumps(info, indent=2))


@app.command()
def up(
    repository: Path = typer.Option(workspace() / "models", help="model repository (servelab triton stage writes it)"),
    http_port: int = typer.Option(TRITON_HTTP_PORT, help="HTTP port"),
    grpc_port: int = typer.Option(TRITON_GRPC_PORT, help="gRPC port"),
    metrics_port: int = typer.Option(TRITON_METRICS_PORT, help="Prometheus metrics port"),
    log: Path | None = typer.Option(None, help="server log file (default: tritonserver.log beside the state file)"),
    model: list[str] | None = typer.Option(None, help="load only these models (repeatable; default all)"),
    timeout: float = typer.Option(300.0, help="seconds to wait for readiness"),
    host: str | None = typer.Option(None, help="address to bind (default: SERVELAB_TRITON_HOST, else 127.0.0.1; "
                                              "the service's SERVELAB_HOST never applies to Triton)"),
):
    """Start the bundled tritonserver in the background on 127.0.0.1 and wait until its models are ready.

    With no model repository at --repository yet, it stages the CPU one there first (as `servelab triton stage`
    with its defaults would), so one command takes a fresh checkout to a running server."""
    from servelab.config import Settings
    from servelab.managed_process import pid_alive
    from servelab.triton import access
    from servelab.triton.server import EmbeddedTriton

    state = _read_state()
    if state and pid_alive(state["pid"]):
        raise CannotRun(f"a tritonserver started by servelab is already running (pid {state['pid']}, "
                        f"HTTP {state['http_url']}); run `servelab triton down` first")
    if not any(repository.glob("*/config.pbtxt")):
        from servelab.triton.repository import stage as do_stage

        typer.echo(f"no model repository at {repository}: staging the CPU one there first", err=True)
        try:
            do_stage("cpu", repository, log_fn=lambda line: typer.echo(line, err=True))
        except FileExistsError as exc:
            raise CannotRun(str(exc)) from None
    log = log or triton_state_dir() / "tritonserver.log"
    srv = EmbeddedTriton(repository, http_port, grpc_port, metrics_port, log, models=model or None,
                         host=host or Settings.from_env().triton_host, startup_timeout=timeout)
    srv.start()  # its own session: it keeps running after this command exits
    state = {"pid": srv.pid, "http_url": srv.http_url, "grpc_url": srv.grpc_url, "metrics_url": srv.metrics_url,
             "repository": str(srv.repository), "log": str(srv.log_path),
             "key_file": str(access.key_path(srv.http_port)), "key_header": access.HEADER}
    _write_state(state)
    srv.proc = None  # detached: this process no longer owns it
    if srv.notice:
        typer.echo(f"note: {srv.notice}", err=True)
    typer.echo(json.dumps({**state, "models": _states(state)}, indent=2))


def _states(state: dict) -> dict:
    from servelab.triton.control import model_states

    try:
        return model_states(state["http_url"])
    except Exception as exc:
        return {"error": str(exc)}


@app.command()
def down(timeout: float = typer.Option(15.0, help="seconds after SIGTERM before SIGKILL")):
    """Stop the tritonserver started by `servelab triton up`."""
    from servelab.managed_process import pid_alive, stop_process_group

    state = _read_state()
    if not state:
        typer.echo("no tritonserver started by servelab is recorded (nothing to stop)")
        return
    pid = state["pid"]
    if pid_alive(pid) and _is_tritonserver(pid):
        stop_process_group(pid, timeout)
        typer.echo(f"stopped tritonserver (pid {pid})")
    else:
        typer.echo(f"tritonserver pid {pid} was not running")
    from servelab.triton import access

    _host, port = access.split(state["http_url"])
    if port is not None:
        access.remove_key(port)
    _state_file().unlink(missing_ok=True)


def _is_tritonserver(pid: int) -> bool:
    try:
        return "tritonserver" in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
    except OSError:
        return False


@app.command()
def status():
    """Is the servelab tritonserver running, and which models are ready? (exit 1 when not running)"""
    from servelab.managed_process import pid_alive

    state = _read_state()
    if not state:
        raise CannotRun("no tritonserver started by servelab is recorded; run `servelab triton up`")
    alive = pid_alive(state["pid"])
    typer.echo(json.dumps({**state, "running": alive, "models": _states(state) if alive else {}}, indent=2))
    if not alive:
        raise CannotRun(f"tritonserver pid {state['pid']} is not running (log: {state['log']})")


@app.command()
def key(url: str | None = typer.Option(None, help="Triton HTTP or gRPC URL (default: the running server's)")):
    """Print the key Triton's model-repository, shared-memory, logging and trace APIs want, for a header such as
    `curl -H "servelab-admin-key: $(servelab triton key)" …` (exit 1 when none is known)."""
    from servelab.triton import access

    state = _read_state() or {}
    url = url or state.get("http_url") or f"http://127.0.0.1:{TRITON_HTTP_PORT}"
    found = access.key_for(url)
    if not found:
        raise CannotRun(f"no key known for the Triton at {url}: start it with `servelab triton up`, or set "
                        "SERVELAB_TRITON_KEY to the key of the stack that runs it (docker/.env on the node)")
    typer.echo(found)


@app.command()
def reconfigure(
    model: str = typer.Argument(..., help="model name, e.g. openclip_vit_b32_cpu"),
    max_delay_us: int | None = typer.Option(None, help="new dynamic batching max_queue_delay_microseconds"),
    instances: int | None = typer.Option(None, help="new instance count"),
    max_queue: int | None = typer.Option(None, help="at most this many requests wait, the next is refused (0 = unbounded)"),
    url: str | None = typer.Option(None, help="Triton HTTP URL (default: the running server's)"),
    repository: Path | None = typer.Option(None, help="also write the change to <repository>/<model>/config.pbtxt"),
):
    """Change a model's queue delay / instance count / queue bound and reload it live (no restart)."""
    from servelab.triton.control import reconfigure as do_reconfigure

    state = _read_state() or {}
    url = url or state.get("http_url") or f"http://127.0.0.1:{TRITON_HTTP_PORT}"
    repository = repository or (Path(state["repository"]) if state.get("repository") else None)
    cfg = do_reconfigure(url, model, max_queue_delay_us=max_delay_us, instances=instances, max_queue=max_queue,
                         repository=repository)
    typer.echo(json.dumps({"model": model, "dynamic_batching": cfg.get("dynamic_batching"),
                           "instance_group": [{k: g.get(k) for k in ("kind", "count", "gpus")} for g in cfg.get("instance_group", [])]},
                          indent=2))


@app.command()
def stats(
    model: str = typer.Argument(CPU_ENCODER, help="model name"),
    url: str | None = typer.Option(None, help="Triton HTTP URL (default: the running server's)"),
):
    """Print a model's cumulative server-side statistics (requests, batches, queue/compute times)."""
    from servelab.triton.server_stats import read_stats

    state = _read_state() or {}
    url = url or state.get("http_url") or f"http://127.0.0.1:{TRITON_HTTP_PORT}"
    typer.echo(json.dumps(read_stats(url, model).summary(), indent=2))


@app.command("get-perf-analyzer")
def get_perf_analyzer():
    """Fetch NVIDIA's perf_analyzer (from the tritonclient 2.51.0 wheel, with pip) into build/perf_analyzer/."""
    from servelab.triton import perf_analyzer as pa

    found = pa.find()
    if found is None:
        found = pa.install()
    pa.library_dir()
    typer.echo(f"{found}\nrun it with LD_LIBRARY_PATH={pa.library_dir()}")
