"""Run the tritonserver bundled in the nvidia-pytriton wheel on loopback, without Docker and without PyTriton.

    from servelab.triton.server import EmbeddedTriton, TritonStartError
    with EmbeddedTriton("models", log_path="triton.log") as srv:        # free loopback ports
        srv.http_url     # "http://127.0.0.1:<port>"   (tritonclient.http wants srv.http_address = "127.0.0.1:<port>")
        srv.grpc_url     # "127.0.0.1:<port>"           (what tritonclient.grpc expects)
        srv.metrics_url  # "http://127.0.0.1:<port>/metrics"
        srv.log_path     # the server's stdout+stderr
        srv.trace_path   # Triton's request trace, off until turned on (servelab.triton.trace.tracing)
        srv.model_states()   # {"openclip_vit_b32_cpu": "READY", ...} (servelab.triton.control.model_states)
        srv.key              # this start's key: the model-repository, shared-memory, logging and trace APIs
                             # answer only requests with the header servelab.triton.access.HEADER = srv.key

A port given as None is a free port (tests, notebooks); `servelab triton up` passes the configured defaults
(8003/8004/8005). Every start draws a new key and restricts Triton's model control (load code), shared memory,
logging and trace APIs to requests that carry it (servelab.triton.access); the key is kept in a 0600 file of
this user's 0700 folder while the server runs, where servelab.triton.control finds it by the server's port.
The log (by default) and the trace file live in that folder too, created without following symbolic links. `start()` waits until every loaded model is ready (--strict-readiness) and raises
TritonStartError — one line — when a port is taken, the binary or python backend is missing, or a model
fails to load (quoting Triton's own reason from the log). `stop()` sends SIGTERM, then SIGKILL to the server's
process group after `stop_timeout` (servelab.managed_process.ManagedProcess). The server runs in its own session, so
one that is never stopped outlives this Python (the CLI's `up`); `servelab.managed_process.stop_process_group(pid)`
stops it later.

How the bundled server is made to run: a backend folder `python/` with links to
libtriton_python.so, triton_python_backend_utils.py and the stub for the stub's Python version; that
interpreter's bin first on PATH (the stub runs `python3` from PATH, so model.py sees that environment's
numpy/onnxruntime/servelab); and LD_LIBRARY_PATH = its LIBDIR so the stub loads the matching libpython.

The stub's interpreter is this one, or the one `SERVELAB_TRITON_PYTHON` names. Two things about it are checked
before the server starts, because both fail silently otherwise:
- The stub ignores PYTHONPATH: model.py imports from that environment's own site-packages, never from a
  folder on PYTHONPATH. An onnxruntime-gpu reached only through PYTHONPATH was missed this way, and the
  machine's CPU build was used instead.
- The bundled python backend (nvidia-pytriton 0.7) was built for numpy 1. Under numpy 2 it answers every
  request with an empty tensor.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from servelab.config import workspace
from servelab.errors import ServelabError
from servelab.managed_process import ManagedProcess
from servelab.netutil import free_port
from servelab.private_files import UnsafePath, open_private
from servelab.triton import access
from servelab.triton.trace import server_args as trace_args

HOST = "127.0.0.1"

# NVIDIA's Triton releases that fixed what the bundled one still has (security bulletin of August 2025,
# https://nvidia.custhelp.com/app/answers/detail/a_id/5687: fixed in 25.07, i.e. Triton 2.59.1)
FIXED_IN = (2, 59, 1)
BULLETIN = "https://nvidia.custhelp.com/app/answers/detail/a_id/5687"


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version)[:3])


def security_notice(server_version: str | None, pytriton_version: str | None = None) -> str | None:
    """One paragraph saying what NVIDIA fixed after the bundled tritonserver, None when it is not older than that.

    The nvidia-pytriton wheel (0.7.0) still bundles Triton 2.51; NVIDIA's bulletin of August 2025 fixed, in 25.07
    (2.59.1), a chain in the python backend that reaches remote code execution through shared memory
    (CVE-2025-23319, CVE-2025-23320, CVE-2025-23334) and stack overflows in the HTTP server's chunked-request
    parsing (CVE-2025-23310, CVE-2025-23311)."""
    if not server_version or _version_tuple(server_version) >= FIXED_IN:
        return None
    source = f" (bundled in nvidia-pytriton {pytriton_version})" if pytriton_version else ""
    return (f"tritonserver {server_version}{source} predates NVIDIA's fixes in Triton 25.07 (2.59.1) for "
            "CVE-2025-23319, CVE-2025-23320 and CVE-2025-23334 (python backend: shared memory to remote code "
            "execution) and CVE-2025-23310, CVE-2025-23311 (HTTP server: chunked requests overflow the stack); "
            f"see {BULLETIN}. Until a newer one is bundled, servelab keeps it on 127.0.0.1 with its model-control, "
            "shared-memory, logging and trace APIs behind this start's key: keep it off the network, and run "
            "NVIDIA's current container (docker/Dockerfile.triton) wherever other machines must reach Triton.")


def pytriton_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("nvidia-pytriton")
    except PackageNotFoundError:
        return None


class TritonStartError(ServelabError, RuntimeError):
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


def stub_python() -> str:
    """The interpreter the python-backend stub runs: SERVELAB_TRITON_PYTHON, else this one."""
    return os.environ.get("SERVELAB_TRITON_PYTHON") or sys.executable


_PROBE = ("import json, sys, sysconfig\n"
          "try:\n    import numpy; np = numpy.__version__\nexcept Exception:\n    np = None\n"
          "print(json.dumps({'version': '%d.%d' % sys.version_info[:2], 'libdir': sysconfig.get_config_var('LIBDIR'),"
          " 'numpy': np}))")


@functools.cache
def probe_stub_python(python: str) -> dict:
    """{version, libdir, numpy} of `python` as the stub sees it: without PYTHONPATH, which the stub ignores."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    try:
        done = subprocess.run([python, "-c", _PROBE], capture_output=True, text=True, env=env, timeout=120)
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError) as exc:
        raise TritonStartError(f"the python-backend interpreter {python} cannot be run: {exc}") from None


def stub_numpy_problem(numpy_version: str | None) -> str | None:
    """Why the bundled python backend cannot run with this numpy (None: it can)."""
    if numpy_version is None:
        return ("numpy cannot be imported by the python backend's interpreter without PYTHONPATH (the stub "
                "ignores PYTHONPATH): install numpy<2 into that environment")
    if int(numpy_version.split(".")[0]) >= 2:
        return (f"the bundled python backend (nvidia-pytriton 0.7, built for numpy 1) answers with empty tensors "
                f"under numpy {numpy_version}: run Triton from an environment with numpy<2 (the triton extra pins "
                "it), or name one in SERVELAB_TRITON_PYTHON")
    return None


def backend_directory(root: Path | None = None) -> Path:
    """A backends folder whose python/ links the bundled python backend and the stub for its interpreter. One
    folder per installation (named by where the backend lives and the stub's Python): a checkout shared with a
    container (the lab image mounts it) holds the host's links and the container's side by side, so a Triton
    started in one never finds the other's paths."""
    src = bundled_root()
    ver = probe_stub_python(stub_python())["version"]
    parts = {
        "libtriton_python.so": src / "backends" / "python" / "libtriton_python.so",
        "triton_python_backend_utils.py": src / "backends" / "python" / "triton_python_backend_utils.py",
        "triton_python_backend_stub": src / "python_backend_stubs" / ver / "triton_python_backend_stub",
    }
    for path in parts.values():
        if not path.exists():
            raise TritonStartError(f"python backend incomplete: {path} missing (Python {ver} stub bundled?)")
    if root is None:
        key = hashlib.sha1(f"{src}|{ver}".encode()).hexdigest()[:10]
        root = workspace() / "build" / "triton" / f"backends-{key}"
    root = Path(root)
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
    python = stub_python()
    venv_bin = str(Path(python).parent)
    env["PATH"] = venv_bin + os.pathsep + env.get("PATH", "")
    libdir = probe_stub_python(python)["libdir"] or ""
    env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (libdir, env.get("LD_LIBRARY_PATH", "")) if p)
    return env


_FAIL_RE = re.compile(r"failed to load '([^']+)'[^:]*:\s*(.*)")
_ERROR_RE = re.compile(r"^E\d{4} [\d:.]+\s+\d+\s+[\w.]+:\d+\]\s*(.*)")


def load_failure(log_text: str) -> str | None:
    """The first model load failure in the log, with Triton's reason (never becomes ready after that)."""
    for line in log_text.splitlines():
        m = _FAIL_RE.search(line)
        if m:
            reason = m.group(2).strip().rstrip('"').strip()
            reason = re.split(r"\\n|\n", reason)[0].strip()  # drop the python traceback Triton appends
            return f"model '{m.group(1)}' failed to load: {reason}"
    return None


def failure_reason(log_text: str) -> str | None:
    """Triton's own reason, from the log: a model load failure first, else the first error line."""
    reason = load_failure(log_text)
    if reason:
        return reason
    for line in log_text.splitlines():
        m = _ERROR_RE.match(line.strip())
        if m and "pinned memory" not in m.group(1) and "CUDA" not in m.group(1):
            return m.group(1).strip().strip('"')
    return None


class EmbeddedTriton(ManagedProcess):
    name = "tritonserver"
    error = TritonStartError

    def __init__(self, repository: Path | str | None = None, http_port: int | None = None,
                 grpc_port: int | None = None, metrics_port: int | None = None, log_path: Path | str | None = None,
                 *, models: list[str] | None = None, host: str = HOST, startup_timeout: float = 180.0,
                 stop_timeout: float = 15.0, extra_args: list[str] | None = None, log_verbose: int = 0,
                 trace_path: Path | str | None = None):
        self.repository = Path(repository or workspace() / "models").resolve()
        self.http_port = http_port or free_port(host)
        self.grpc_port = grpc_port or free_port(host)
        self.metrics_port = metrics_port or free_port(host)
        # by default in this user's 0700 folder: a fixed name in the shared temporary folder could be a link another
        # user planted there
        log_path = Path(log_path) if log_path else access.user_dir() / f"triton-{self.http_port}.log"
        super().__init__(host=host, log_path=log_path, startup_timeout=startup_timeout, stop_timeout=stop_timeout)
        self.models = models
        self.extra_args = list(extra_args or [])
        self.log_verbose = log_verbose
        # Triton's request trace goes here, OFF until the trace API turns it on (servelab.triton.trace)
        self.trace_path = Path(trace_path) if trace_path else log_path.with_name(log_path.stem + ".trace.json")
        self.cwd = str(self.repository)
        self.key: str | None = None  # drawn by start(); the restricted APIs answer only requests carrying it
        self.notice: str | None = None  # security_notice() for the version that answered, after start()

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

    @property
    def ready_url(self) -> str:
        return f"{self.http_url}/v2/health/ready"

    # --- what ManagedProcess runs -----------------------------------------------------------------
    def command(self) -> list[str]:
        load = self.models or ["*"]
        return [
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
            # every staged config is complete (inputs, outputs, batch size), and none of our model.py files
            # completes one: without this, each (re)load of a python-backend model first runs a stub process
            # only to ask model.py for a completion: 1.0-1.4 s of a 1.5-3.0 s reload on 2 cores
            "--disable-auto-complete-config",
            # idle keep-alive client connections would otherwise hold a graceful shutdown for 30 s
            f"--exit-timeout-secs={max(1, int(self.stop_timeout) - 5)}",
            f"--log-verbose={self.log_verbose}",
            *access.server_args(self.key),
            *([] if any(a.startswith("--trace-config") for a in self.extra_args) else trace_args(self.trace_path)),
            *self.extra_args,
        ]

    def environment(self) -> dict:
        return server_env()

    @property
    def headers(self) -> dict[str, str]:
        """{access.HEADER: key} for tritonclient's `headers=` (the restricted APIs refuse calls without it)."""
        return {access.HEADER: self.key} if self.key else {}

    @property
    def grpc_headers(self) -> dict[str, str]:
        """The same for tritonclient's gRPC client, whose header Triton names with its own prefix."""
        return {access.GRPC_HEADER: self.key} if self.key else {}

    # --- lifecycle: a key per start, kept where this user's other processes find it ----------------
    def start(self):
        self.key = access.new_key()
        try:
            super().start()
        except BaseException:
            self.key = None
            raise
        # written once ready (not before: a start refused for a taken port must not replace that server's key)
        access.write_key(access.KeyRecord(self.key, self.host, self.http_port, self.grpc_port, self.pid))
        self.notice = security_notice(self.server_version(), pytriton_version())
        if self.notice and self.log_path:
            with os.fdopen(open_private(self.log_path), "a") as fh:
                fh.write(f"=== servelab: {self.notice} ===\n")
        return self

    def stop(self) -> int | None:
        if self.key is not None:
            with contextlib.suppress(OSError, UnsafePath):
                access.remove_key(self.http_port, self.key)
        return super().stop()

    def server_version(self) -> str | None:
        """The version the running server reports (GET /v2, open to all), None when it does not answer."""
        import httpx

        try:
            return httpx.get(f"{self.http_url}/v2", timeout=5.0).json().get("version")
        except (httpx.HTTPError, ValueError):
            return None

    def ports(self) -> dict[str, tuple[int, str]]:
        return {"Triton HTTP": (self.http_port, "--http-port"), "Triton gRPC": (self.grpc_port, "--grpc-port"),
                "Triton metrics": (self.metrics_port, "--metrics-port")}

    def check(self) -> None:
        if not self.repository.is_dir() or not any(self.repository.glob("*/config.pbtxt")):
            raise TritonStartError(
                f"model repository {self.repository} is missing or empty; run `servelab triton stage` first"
            )
        problem = stub_numpy_problem(probe_stub_python(stub_python())["numpy"])
        if problem:
            raise TritonStartError(problem)
        super().check()
        if self.log_path:  # created 0600, never through a link (ManagedProcess then appends to this very file)
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.close(open_private(self.log_path))
            except UnsafePath as exc:
                raise TritonStartError(f"the log {exc}") from None

    def fatal_in_log(self, log_text: str) -> str | None:
        return load_failure(log_text)

    def failure_reason(self, log_text: str) -> str | None:
        return failure_reason(log_text)

    def model_states(self) -> dict[str, str]:
        from servelab.triton.control import model_states

        return model_states(self.http_url)

    def __repr__(self) -> str:
        return f"EmbeddedTriton(http={self.http_url}, grpc={self.grpc_url}, metrics={self.metrics_url}, repo={self.repository})"

