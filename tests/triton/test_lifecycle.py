"""Embedded server lifecycle: one clear line for every way starting can fail; `servelab triton up/status/down`.

These use a tiny python-backend model (no ONNX load), so each start costs a few seconds at most."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from servelab.managed_process import pid_alive
from servelab.netutil import free_port, port_in_use
from servelab.triton.server import EmbeddedTriton, TritonStartError

pytestmark = pytest.mark.triton

ECHO_CONFIG = """
name: "%s"
backend: "python"
max_batch_size: 8
input [ { name: "x", data_type: TYPE_FP32, dims: [ 2 ] } ]
output [ { name: "y", data_type: TYPE_FP32, dims: [ 2 ] } ]
instance_group [ { kind: KIND_CPU, count: 1 } ]
"""
ECHO_MODEL = """
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        %s

    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("y", pb_utils.get_input_tensor_by_name(r, "x").as_numpy() * 2)])
                for r in requests]
"""


def make_repo(root: Path, name: str = "echo", init: str = "pass") -> Path:
    d = root / name / "1"
    d.mkdir(parents=True)
    (root / name / "config.pbtxt").write_text(ECHO_CONFIG % name)
    (d / "model.py").write_text(ECHO_MODEL % init)
    return root


@pytest.fixture()
def echo_repo(tmp_path):
    return make_repo(tmp_path / "repo")


def test_port_taken_is_one_clear_line(echo_repo, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        taken = s.getsockname()[1]
        with pytest.raises(TritonStartError) as e:
            EmbeddedTriton(echo_repo, grpc_port=taken, log_path=tmp_path / "log").start()
    msg = str(e.value)
    assert f"gRPC port {taken}" in msg and "already in use" in msg and "--grpc-port" in msg
    assert "\n" not in msg


def test_missing_binary_and_empty_repository(echo_repo, tmp_path, monkeypatch):
    with pytest.raises(TritonStartError, match="missing or empty; run `servelab triton stage`"):
        EmbeddedTriton(tmp_path / "nothing-here").start()
    monkeypatch.setenv("SERVELAB_TRITONSERVER", str(tmp_path / "no" / "tritonserver"))
    with pytest.raises(TritonStartError, match="tritonserver binary not found"):
        EmbeddedTriton(echo_repo).start()


def test_model_that_fails_to_load_quotes_tritons_reason(tmp_path):
    repo = make_repo(tmp_path / "repo", "echo")
    make_repo(repo, "broken", 'raise RuntimeError("deliberately broken for the test")')
    srv = EmbeddedTriton(repo, log_path=tmp_path / "triton.log", startup_timeout=120)
    with pytest.raises(TritonStartError) as e:
        srv.start()
    msg = str(e.value)
    assert "'broken' failed to load" in msg and "deliberately broken for the test" in msg, msg
    assert str(tmp_path / "triton.log") in msg
    assert not srv.running()
    assert not port_in_use(srv.http_port)


def test_context_manager_serves_and_stops(echo_repo, tmp_path):
    import numpy as np
    import tritonclient.http as th

    with EmbeddedTriton(echo_repo, log_path=tmp_path / "log") as srv:
        pid = srv.pid
        assert srv.model_states() == {"echo": "READY"}
        c = th.InferenceServerClient(srv.http_address)
        inp = th.InferInput("x", [1, 2], "FP32")
        inp.set_data_from_numpy(np.array([[1.0, 2.0]], np.float32), binary_data=True)
        assert c.infer("echo", [inp]).as_numpy("y").tolist() == [[2.0, 4.0]]
        c.close()
    assert not pid_alive(pid)
    assert not port_in_use(srv.http_port) and not port_in_use(srv.grpc_port)


def _cli(*args, env):
    return subprocess.run([sys.executable, "-m", "servelab.cli", "triton", *args], env=env, capture_output=True,
                          text=True, timeout=180)


def test_cli_up_status_down(echo_repo, tmp_path):
    # the service published on every address: Triton stays on loopback all the same
    env = {**os.environ, "SERVELAB_TRITON_STATE_DIR": str(tmp_path / "state"), "SERVELAB_HOST": "0.0.0.0"}
    env.pop("SERVELAB_TRITON_HOST", None)
    ports = [str(free_port()) for _ in range(3)]
    opts = ["--repository", str(echo_repo), "--http-port", ports[0], "--grpc-port", ports[1], "--metrics-port", ports[2]]
    up = _cli("up", *opts, env=env)
    assert up.returncode == 0, up.stderr
    state = json.loads(up.stdout)
    try:
        assert state["models"] == {"echo": "READY"} and pid_alive(state["pid"])
        assert state["http_url"] == f"http://127.0.0.1:{ports[0]}"
        assert "tritonserver 2.51.0 (bundled in nvidia-pytriton" in up.stderr and "CVE-2025-23319" in up.stderr
        key = _cli("key", env=env)
        assert key.returncode == 0 and json.loads(Path(state["key_file"]).read_text())["key"] == key.stdout.strip()
        st = _cli("status", env=env)
        assert st.returncode == 0 and json.loads(st.stdout)["running"] is True
        again = _cli("up", *opts, env=env)
        assert again.returncode == 1 and again.stderr.count("\n") == 1 and "already running" in again.stderr
    finally:
        down = _cli("down", env=env)
    assert down.returncode == 0 and "stopped" in down.stdout
    assert not pid_alive(state["pid"])
    assert not Path(state["key_file"]).exists()
    gone = _cli("status", env=env)
    assert gone.returncode == 1 and gone.stderr.startswith("error: ")


def test_cli_up_on_taken_port(echo_repo, tmp_path):
    env = {**os.environ, "SERVELAB_TRITON_STATE_DIR": str(tmp_path / "state")}
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        taken = s.getsockname()[1]
        r = _cli("up", "--repository", str(echo_repo), "--http-port", str(taken), "--grpc-port", str(free_port()),
                 "--metrics-port", str(free_port()), env=env)
    assert r.returncode == 1
    assert r.stderr.strip() == (f"error: Triton HTTP port {taken} on 127.0.0.1 is already in use; "
                                "stop what holds it or pick another with --http-port")


def test_an_interpreter_without_numpy_for_the_stub_is_refused_before_the_server_starts(echo_repo, tmp_path,
                                                                                      monkeypatch):
    """SERVELAB_TRITON_PYTHON names the stub's interpreter; a bare venv has no numpy, so no model could run."""
    venv = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    monkeypatch.setenv("SERVELAB_TRITON_PYTHON", str(venv / "bin" / "python"))
    srv = EmbeddedTriton(echo_repo, log_path=tmp_path / "t.log")
    with pytest.raises(TritonStartError, match="numpy cannot be imported by the python backend's interpreter"):
        srv.start()
    assert srv.proc is None  # refused before anything was started


def test_the_stub_interpreter_is_probed_without_pythonpath(tmp_path, monkeypatch):
    """The stub ignores PYTHONPATH, so the probe must too: a numpy on PYTHONPATH is not the one the stub gets."""
    from servelab.triton.server import probe_stub_python

    fake = tmp_path / "shadow" / "numpy"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("__version__ = '9.9.9'\n")
    monkeypatch.setenv("PYTHONPATH", str(fake.parent))
    probe_stub_python.cache_clear()
    import numpy

    assert probe_stub_python(sys.executable)["numpy"] == numpy.__version__ != "9.9.9"


@pytest.mark.parametrize(("version", "refused"), [("1.26.4", False), ("2.5.2", True), ("2.0.0", True)])
def test_numpy_2_is_refused_for_the_bundled_python_backend(version, refused):
    """Under numpy 2 the bundled stub answers with empty tensors (seen on the GPU machine, reproduced on a CPU)."""
    from servelab.triton.server import stub_numpy_problem

    problem = stub_numpy_problem(version)
    assert (problem is not None) == refused
    if refused:
        assert "empty tensors" in problem and version in problem


def test_two_installations_sharing_a_checkout_keep_their_own_backend_links(tmp_path, monkeypatch):
    """The lab image mounts the checkout: a Triton started in the container must not repoint the host's python
    backend links at paths only the container has (seen: the host's smoke lab then failed to load a model)."""
    from servelab.triton import server

    monkeypatch.setenv("SERVELAB_HOME", str(tmp_path / "checkout"))
    here = server.backend_directory()
    real = server.bundled_root()
    other = tmp_path / "elsewhere" / "tritonserver"  # another installation's copy of the same files
    for rel in ("backends/python/libtriton_python.so", "backends/python/triton_python_backend_utils.py",
                *(str(p.relative_to(real)) for p in (real / "python_backend_stubs").glob("*/triton_python_backend_stub"))):
        (other / rel).parent.mkdir(parents=True, exist_ok=True)
        (other / rel).write_bytes(b"")
    monkeypatch.setattr(server, "bundled_root", lambda: other)
    there = server.backend_directory()
    assert here != there and here.parent == there.parent
    assert (here / "python" / "libtriton_python.so").resolve() == (real / "backends/python/libtriton_python.so").resolve()
    assert (there / "python" / "libtriton_python.so").resolve() == (other / "backends/python/libtriton_python.so")
