"""Every image in docker/ built and run for real: the service answers like the in-process engine and turns
healthy only once it can serve, the GPU image refuses to run without a GPU, the lab image runs the lab."""

from __future__ import annotations

import json
import os
import urllib.request

import numpy as np
import pytest

from servelab.netutil import free_port
from tests.conftest import cosine
from tests.docker.conftest import docker, http_get, wait_for


@pytest.fixture
def container_name(request):
    name = f"servelab-test-{request.node.name[:40].replace('[', '-').replace(']', '')}-{os.getpid()}"
    yield name
    docker("rm", "-f", name, check=False)


def test_the_service_image_is_healthy_only_once_it_can_serve(image, onnx_meta, container_name):
    """The image's HEALTHCHECK probes readiness: while the model warms up /healthz answers 200 and the check
    still fails, so `depends_on: service_healthy` cannot send traffic to a service that cannot answer."""
    tag = image("servelab:cpu-0.1.0")
    port = free_port()
    artifacts = os.path.dirname(onnx_meta["path"])
    # many warm-up batches keep the service alive-but-not-ready long enough to look at it
    docker("run", "-d", "--name", container_name, "-p", f"127.0.0.1:{port}:8002", "-v", f"{artifacts}:/models:ro",
           "-e", "SERVELAB_WARMUP_ITERS=60", tag)
    url = f"http://127.0.0.1:{port}"
    wait_for(lambda: http_get(f"{url}/healthz", timeout=2)[0] == 200, 120, what="the container's /healthz")
    check = docker("exec", container_name, "python", "/opt/servelab/docker/healthcheck.py", check=False)
    ready_status, _ = http_get(f"{url}/readyz")
    if ready_status == 200:
        pytest.fail("the service was ready before it could be observed loading: raise SERVELAB_WARMUP_ITERS")
    assert check.returncode == 1 and "readyz" in check.stderr, check.stderr
    wait_for(lambda: http_get(f"{url}/readyz", timeout=2)[0] == 200, 300, what="/readyz")
    assert docker("exec", container_name, "python", "/opt/servelab/docker/healthcheck.py", check=False).returncode == 0


def test_the_02_stack_serves_the_in_process_embedding(image, onnx_meta, photos, local_embedder):
    """docker/compose.02-service-cpu.yaml as the README runs it: up --wait turns healthy (the service's user,
    uid 10001, can read the export written on the host), and /embed gives the in-process embedding."""
    from servelab.model.preprocess import preprocess_bytes

    image("servelab:cpu-0.1.0")
    port = free_port()
    project = f"servelab-test-02-{os.getpid()}"
    env = {**os.environ, "SERVELAB_CPU_SERVICE_PORT": str(port)}
    base = ["compose", "-p", project, "-f", "docker/compose.02-service-cpu.yaml"]
    try:
        docker(*base, "up", "-d", "--wait", "--no-build", timeout=300, env=env)
        state = json.loads(docker(*base, "ps", "--format", "json", env=env).stdout.splitlines()[0])
        assert state["Health"] == "healthy", state
        req = urllib.request.Request(f"http://127.0.0.1:{port}/embed", data=photos[0],
                                     headers={"Content-Type": "image/jpeg"})
        with urllib.request.urlopen(req, timeout=60) as resp:
            body = json.loads(resp.read())
        served = np.asarray(body["embeddings"], dtype=np.float32)
        expected = local_embedder.embed(np.stack([preprocess_bytes(photos[0])]))
        assert served.shape == (1, 512)
        assert float(cosine(served, expected).min()) >= 0.9999
        status, info = http_get(f"http://127.0.0.1:{port}/info")
        assert status == 200 and info["weights"] == onnx_meta["weights"]
    finally:
        docker(*base, "down", "--remove-orphans", timeout=120, env=env, check=False)


def test_the_gpu_image_without_a_gpu_says_so_in_one_line(image, onnx_meta):
    tag = image("servelab:gpu-0.1.0")
    artifacts = os.path.dirname(onnx_meta["path"])
    out = docker("run", "--rm", "-v", f"{artifacts}:/models:ro", tag, check=False, timeout=120)
    assert out.returncode != 0
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "sees no GPU" in lines[0], out.stderr


def test_the_gpu_image_has_what_the_node_notebooks_import(image):
    """Notebooks 02 and 08 run the repository's deploy checks (pytest, the kubernetes client) in the node's lab."""
    tag = image("servelab:gpu-0.1.0")
    out = docker("run", "--rm", "--entrypoint", "python", tag, "-c",
                 "import pytest, kubernetes, papermill, servelab; print('ok')", check=False, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr

