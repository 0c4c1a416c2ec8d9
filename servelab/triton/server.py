"""Run the tritonserver bundled in the nvidia-pytriton wheel on loopback, without Docker and without PyTriton.

    from servelab.triton.server import EmbeddedTriton, TritonStartError
    with EmbeddedTriton(repository="models", http_port=None, grpc_port=None, metrics_port=None,
                        log_path=None, models=None, startup_timeout=180) as srv:
        srv.http_url     # "http://127.0.0.1:<port>"   (tritonclient.http wants srv.http_address = "127.0.0.1:<port>")
        srv.grpc_url     # "127.0.0.1:<port>"           (what tritonclient.grpc expects)
        srv.metrics_url  # "http://127.0.0.1:<port>/metrics"
        srv.log_path     # the server's stdout+stderr
        srv.model_states()   # {"openclip_vit_b32_cpu": "READY", ...} from the repository index

A port given as None is a free port (tests, notebooks); `servelab triton up` passes the configured defaults
(8003/8004/8005). `start()` waits until every loaded model is ready (--strict-readiness) and raises
TritonStartError — one line — when a port is taken, the binary or python backend is missing, or a model
fails to load (quoting Triton's own reason from the log). `stop()` sends SIGTERM, then SIGKILL to the server's
process group after `stop_timeout`. `start(detach=True)` leaves the server running after this Python exits
(the CLI's `up`); `stop_pid(pid)` stops such a server later.

How the bundled server is made to run (see ENVIRONMENT.md): a backend folder `python/` with links to
libtriton_python.so, triton_python_backend_utils.py and the stub for this Python version; the venv's bin first
on PATH (the stub runs `python3` from PATH, so model.py sees the venv's numpy/onnxruntime/servelab); and
LD_LIBRARY_PATH = this interpreter's LIBDIR so the stub loads the matching libpython.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

from servelab.config import REPO_ROOT
from servelab.netutil import free_port, port_in_use

HOST = "127.0.0.1"


class TritonStartError(RuntimeError):
    """tritonserver could not be started or a model did not load; the message is one line saying why."""


def bundled_root() -> Path:
    try:
        import pytriton
    except ImportError:
        raise TritonStartError("nvidia-pytriton is not installed (it bundles tritonserver); run `make setup`") from None
    return Path(pytriton.__file__).resolve().parent / "tritonserver"


def find_tritonserver() -> Path:
    binary = Path(os.environ.get("SERVELAB_TRITONSERVER") or bundled_root() / "bin" / "tritonserver")
    if not binary.is_file() or not os.access(binary, os.X_OK):
        raise TritonStartError(f"tritonserver binary not found or not executable at {binary}")
    return binary


def backend_directory(root: Path | None = None) -> Path:
    """A backends folder whose python/ links the bundled python backend and this Python's stub."""
    src = bundled_root()
    ver = f"{sys.version_info.major}.{sys.version_info.minor}"
    parts = {
        "libtriton_python.so": src / "backends" / "python" / "libtriton_python.so",
        "triton_python_backend_utils.py": src / "backends" / "python" / "triton_python_backend_utils.py",
        "triton_python_backend_stub": src / "python_backend_stubs" / ver / "triton_python_backend_stub",
    }
    for name, path in parts.items():
        if not path.exists():
            raise TritonStartError(f"python backend incomplete: {path} missing (Python {ver} stub bundled?)")
    root = Path(root or REPO_ROOT / "build" / "triton" / "backends")
    pydir = root / "python"
    pydir.mkdir(parents=True, exist_ok=True)
    for name, path in parts.items():
        link = pydir / name
        if link.is_symlink() and Path(os.readlink(link)) == path:
            continue
        tmp = pydir / f".{name}.{os.getpid()}"
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(path)
        os.replace(tmp, link)
    return root


def server_env() -> dict:
    env = dict(os.environ)
    venv_bin = str(Path(sys.executable).parent)
    env["PATH"] = venv_bin + os.pathsep + env.get("PATH", "")
    libdir = sysconfig.get_config_var("LIBDIR") or ""
    env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (libdir, env.get("LD_LIBRARY_PATH", "")) if p)
    return env


_FAIL_RE = re.compile(r"failed to load '([^']+)'[^:]*:\s*(.*)")
_ERROR_RE = re.compile(r"^E\d{4} [\d:.]+\s+\d+\s+[\w.]+:\d+\]\s*(.*)")


def failure_reason(log_text: str) -> str | None:
    """Triton's own reason, from the log: a model load failure first, else the first error line."""
    for line in log_text.splitlines():
        m = _FAIL_RE.search(line)
        if m:
            reason = m.group(2).strip().rstrip('"').strip()
            reason = re.split(r"\\n|\n", reason)[0].strip()  # drop the python traceback Triton appends
            return f"model '{m.group(1)}' failed to load: {reason}"
    for line in log_text.splitlines():
        m = _ERROR_RE.match(line.strip())
        if m and "pinned memory" not in m.group(1) and "CUDA" not in m.group(1):
            return m.group(1).strip().strip('"')
    return None


class EmbeddedTriton:
    def __init__(self, repository: Path | str | None = None, http_port: int | None = None,
                 grpc_port: int | None = None, metrics_port: int | None = None, log_path: Path | str | None = None,
                 *, models: list[str] | None = None, host: str = HOST, startup_timeout: float = 180.0,
                 stop_timeout: float = 15.0, extra_args: list[str] | None = None, log_verbose: int = 0):
        self.repository = Path(repository or REPO_ROOT / "models").resolve()
        self.host = host
        self.http_port = http_port or free_port(host)
        self.grpc_port = grpc_port or free_port(host)
        self.metrics_port = metrics_port or free_port(host)
        self.log_path = Path(log_path) if log_path else Path(tempfile.gettempdir()) / f"servelab-triton-{self.http_port}.log"
        self.models = models
        self.startup_timeout, self.stop_timeout = startup_timeout, stop_timeout
        self.extra_args = list(extra_args or [])
        self.log_verbose = log_verbose
        self.proc: subprocess.Popen | None = None
        self.pid: int | None = None

    # --- addresses --------------------------------------------------------------------------------
    @property
    def http_address(self) -> str:
        return f"{self.host}:{self.http_port}"

    @property
    def http_url(self) -> str:
        return f"http://{self.http_address}"

    @property
    def grpc_url(self) -> str:
        return f"{self.host}:{self.grpc_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://{self.host}:{self.metrics_port}/metrics"

    def command(self) -> list[str]:
        load = self.models or ["*"]
        cmd = [
            str(find_tritonserver()),
            f"--model-repository={self.repository}",
            f"--backend-directory={backend_directory()}",
            "--model-control-mode=explicit",
            *[f"--load-model={m}" for m in load],
            f"--http-address={self.host}", f"--http-port={self.http_port}",
            f"--grpc-address={self.host}", f"--grpc-port={self.grpc_port}",
            f"--metrics-address={self.host}", f"--metrics-port={self.metrics_port}",
            "--allow-metrics=true", "--allow-gpu-metrics=false", "--allow-cpu-metrics=true",
            "--exit-on-error=true", "--strict-readiness=true",
            # idle keep-alive client connections would otherwise hold a graceful shutdown for 30 s
            f"--exit-timeout-secs={max(1, int(self.stop_timeout) - 5)}",
            f"--log-verbose={self.log_verbose}",
            *self.extra_args,
        ]
        return cmd

    # --- lifecycle --------------------------------------------------------------------------------
    def _check_before_start(self) -> None:
        if not self.repository.is_dir() or not any(self.repository.glob("*/config.pbtxt")):
            raise TritonStartError(
                f"model repository {self.repository} is missing or empty; run `servelab triton stage` first"
            )
        for what, port in (("HTTP", self.http_port), ("gRPC", self.grpc_port), ("metrics", self.metrics_port)):
            if port_in_use(port, self.host):
                flag = {"HTTP": "--http-port", "gRPC": "--grpc-port", "metrics": "--metrics-port"}[what]
                raise TritonStartError(
                    f"Triton {what} port {port} on {self.host} is already in use; stop what holds it or pick another with {flag}"
                )

    def start(self, detach: bool = False) -> "EmbeddedTriton":
        self._check_before_start()
        cmd = self.command()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            log.write(f"\n=== servelab: starting tritonserver {time.strftime('%Y-%m-%dT%H:%M:%S')} ===\n".encode())
            log.flush()
            start_at = log.tell()
            self.proc = subprocess.Popen(cmd, env=server_env(), stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True, cwd=str(self.repository))
        self.pid = self.proc.pid
        try:
            self._wait_ready(start_at)
        except BaseException:
            self.stop()
            raise
        return self

    def _log_since(self, offset: int) -> str:
        try:
            with open(self.log_path, "rb") as fh:
                fh.seek(offset)
                return fh.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def _wait_ready(self, log_offset: int) -> None:
        import httpx

        deadline = time.monotonic() + self.startup_timeout
        url = f"{self.http_url}/v2/health/ready"
        while time.monotonic() < deadline:
            code = self.proc.poll()
            if code is not None:
                reason = failure_reason(self._log_since(log_offset)) or f"exited with code {code}"
                raise TritonStartError(f"tritonserver did not start: {reason} (log: {self.log_path})")
            try:
                if httpx.get(url, timeout=1.0).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            reason = None
            text = self._log_since(log_offset)
            if "failed to load" in text:
                reason = failure_reason(text)
            if reason:
                raise TritonStartError(f"tritonserver did not start: {reason} (log: {self.log_path})")
            time.sleep(0.2)
        reason = failure_reason(self._log_since(log_offset))
        raise TritonStartError(
            f"tritonserver not ready after {self.startup_timeout:.0f} s"
            + (f": {reason}" if reason else "") + f" (log: {self.log_path})"
        )

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> int | None:
        """SIGTERM, then SIGKILL to the process group after stop_timeout; returns the exit code."""
        if self.proc is None:
            return None
        code = stop_pid(self.proc.pid, self.stop_timeout, proc=self.proc)
        self.proc = None
        return code

    def model_states(self) -> dict[str, str]:
        return model_states(self.http_url)

    def __enter__(self) -> "EmbeddedTriton":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"EmbeddedTriton(http={self.http_url}, grpc={self.grpc_url}, metrics={self.metrics_url}, repo={self.repository})"


def model_states(http_url: str, timeout: float = 5.0) -> dict[str, str]:
    """{model name: state} from POST /v2/repository/index (READY, UNAVAILABLE, ... ; reason kept when given)."""
    import httpx

    r = httpx.post(f"{http_url.rstrip('/')}/v2/repository/index", json={}, timeout=timeout)
    r.raise_for_status()
    out = {}
    for m in r.json():
        state = m.get("state", "") or "UNKNOWN"
        if m.get("reason"):
            state = f"{state}: {m['reason']}"
        out[m["name"]] = state
    return out


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (our own exited child) counts as gone
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def stop_pid(pid: int, timeout: float = 15.0, proc: subprocess.Popen | None = None) -> int | None:
    """Stop a tritonserver we started: SIGTERM to it, then SIGKILL to its process group after `timeout`."""
    if proc is not None and proc.poll() is not None:
        return proc.returncode
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return proc.poll() if proc else None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None:
            if proc.poll() is not None:
                return proc.returncode
        elif not pid_alive(pid):
            return 0
        time.sleep(0.1)
    try:
        os.killpg(pid, signal.SIGKILL)  # the server and its python-backend stubs (own session, pgid == pid)
    except (ProcessLookupError, PermissionError):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if proc is not None:
        return proc.wait(10)
    return -signal.SIGKILL
