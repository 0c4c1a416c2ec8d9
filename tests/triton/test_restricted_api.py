"""Triton's model control is closed to web pages and strangers: a real embedded tritonserver refuses a load that
carries code unless the request has this start's key, the course's own control calls send the key by themselves,
and the key, the log and the bind are this user's alone.

A tiny python-backend model (no ONNX load) keeps each start to a few seconds."""

from __future__ import annotations

import base64
import json
import os
import stat

import httpx
import pytest

from servelab.config import Settings
from servelab.triton import access, control
from servelab.triton.server import EmbeddedTriton, TritonStartError, security_notice
from tests.triton.test_lifecycle import make_repo

pytestmark = pytest.mark.triton

INTRUDER_CONFIG = {
    "name": "intruder", "backend": "python", "max_batch_size": 0,
    "input": [{"name": "x", "data_type": "TYPE_FP32", "dims": [1]}],
    "output": [{"name": "y", "data_type": "TYPE_FP32", "dims": [1]}],
}
INTRUDER_MODEL = """
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        open(%r, "w").write("ran")

    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("y", pb_utils.get_input_tensor_by_name(r, "x").as_numpy())])
                for r in requests]
"""


def intruder_body(marker) -> bytes:
    """What a web page would post: a config and a base64 model.py, as the repository extension defines them."""
    model_py = base64.b64encode((INTRUDER_MODEL % str(marker)).encode()).decode()
    return json.dumps({"parameters": {"config": json.dumps(INTRUDER_CONFIG), "file:1/model.py": model_py}}).encode()


@pytest.fixture(scope="module")
def restricted(tmp_path_factory):
    root = tmp_path_factory.mktemp("restricted")
    with EmbeddedTriton(make_repo(root / "repo"), log_path=root / "tritonserver.log", startup_timeout=120) as srv:
        yield srv


def test_a_text_plain_load_carrying_code_is_refused_and_its_code_never_runs(restricted, tmp_path):
    marker = tmp_path / "initialize-ran"
    url = f"{restricted.http_url}/v2/repository/models/intruder/load"
    # what any web page may send to 127.0.0.1 without a preflight: a "simple" POST, text/plain
    r = httpx.post(url, content=intruder_body(marker), headers={"Content-Type": "text/plain"}, timeout=60)
    assert r.status_code == 403, r.text
    assert "restricted" in r.text.lower() or access.HEADER in r.text
    assert not marker.exists()
    assert "intruder" not in control.model_states(restricted.http_url)

    # the same request with this start's key is what Triton would have run without the restriction
    r = httpx.post(url, content=intruder_body(marker), headers={"Content-Type": "text/plain", **restricted.headers},
                   timeout=120)
    try:
        assert r.status_code == 200, r.text
        assert marker.read_text() == "ran"
    finally:
        control.unload_model(restricted.http_url, "intruder")


def test_the_courses_own_control_calls_send_the_key(restricted):
    import tritonclient.http as th
    from tritonclient.utils import InferenceServerException

    control.load_model(restricted.http_url, "echo")  # finds the key by the server's port
    assert control.model_states(restricted.http_url) == {"echo": "READY"}
    bare = th.InferenceServerClient(restricted.http_address)
    with pytest.raises(InferenceServerException) as refused:
        bare.load_model("echo")
    assert refused.value.status() == "403"
    bare.load_model("echo", headers=restricted.headers)  # what a lesson shows: tritonclient's own headers=
    bare.close()
    with pytest.raises(RuntimeError, match=f"HTTP 403.*needs the header {access.HEADER}"):
        _load_with(restricted, "wrong-key")
    # inference stays open: the lessons' clients and perf_analyzer send no key
    assert httpx.get(f"{restricted.http_url}/v2/models/echo/config", timeout=10).status_code == 200


def _load_with(srv, key):
    with control.management_client(srv.http_url, "load 'echo'", key=key) as c:
        c.load_model("echo")


def test_grpc_refuses_the_repository_call_without_the_key(restricted):
    import tritonclient.grpc as tg
    from tritonclient.utils import InferenceServerException

    client = tg.InferenceServerClient(restricted.grpc_url)
    try:
        with pytest.raises(InferenceServerException) as refused:
            client.load_model("echo")
        assert "restricted" in refused.value.message() and access.GRPC_HEADER in refused.value.message()
        with pytest.raises(InferenceServerException):
            client.get_model_repository_index()
        with pytest.raises(InferenceServerException):
            client.load_model("echo", headers=restricted.headers)  # the HTTP header's name is not the gRPC one
        client.load_model("echo", headers=restricted.grpc_headers)
        index = client.get_model_repository_index(headers=access.headers(restricted.grpc_url, grpc=True), as_json=True)
        assert [m["name"] for m in index["models"]] == ["echo"]
        assert client.is_model_ready("echo")  # health and inference need no key
    finally:
        client.close()


def test_the_key_is_drawn_per_start_kept_0600_in_a_0700_folder_and_removed_at_stop(restricted, tmp_path):
    path = access.key_path(restricted.http_port)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and path.stat().st_uid == os.getuid()
    folder = path.parent
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700 and not folder.is_symlink()
    assert json.loads(path.read_text())["key"] == restricted.key == access.key_for(restricted.grpc_url)
    other = EmbeddedTriton(make_repo(tmp_path / "repo"), log_path=tmp_path / "t.log", startup_timeout=120).start()
    try:
        assert other.key != restricted.key
        assert access.key_for(other.http_url) == other.key
    finally:
        other.stop()
    assert not access.key_path(other.http_port).exists()
    assert access.key_for(restricted.http_url) == restricted.key  # the other server's stop left this one's alone


def test_the_log_lives_in_the_users_folder_and_is_never_written_through_a_link(tmp_path):
    srv = EmbeddedTriton(make_repo(tmp_path / "repo"))
    assert srv.log_path.parent == access.user_dir() and srv.trace_path.parent == access.user_dir()
    target = tmp_path / "someone-elses-file"
    target.write_text("untouched")
    link = tmp_path / "triton.log"
    link.symlink_to(target)
    with pytest.raises(TritonStartError, match="symbolic link"):
        EmbeddedTriton(make_repo(tmp_path / "repo2"), log_path=link).start()
    assert target.read_text() == "untouched"


def test_triton_binds_loopback_apart_from_the_service(monkeypatch):
    monkeypatch.setenv("SERVELAB_HOST", "0.0.0.0")  # publishing the service ...
    monkeypatch.delenv("SERVELAB_TRITON_HOST", raising=False)
    s = Settings.from_env()
    assert s.host == "0.0.0.0" and s.triton_host == "127.0.0.1"  # ... never publishes Triton
    monkeypatch.setenv("SERVELAB_TRITON_HOST", "10.0.0.5")
    assert Settings.from_env().triton_host == "10.0.0.5"
    assert EmbeddedTriton("models", 1, 2, 3).host == "127.0.0.1"


def test_the_bundled_server_says_what_nvidia_fixed_after_it(restricted):
    assert restricted.server_version() == "2.51.0"
    assert restricted.notice and "CVE-2025-23319" in restricted.notice and "25.07" in restricted.notice
    assert restricted.notice in restricted.log_path.read_text()
    assert security_notice("2.59.1") is None and security_notice("2.61.0") is None
