"""Every docker/compose.*.yaml: valid against the Compose Specification (vendored schema, or `docker compose
config` when a compose plugin exists), pinned images, existing build files and mount sources, GPU requests,
and the ports and model repository paths the rest of servelab expects."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
from pathlib import Path

import jsonschema
import pytest
import yaml

from servelab.provision import NODE_PORTS
from servelab.provision.compose import InterpolationError, container_ports, interpolate, load, published_ports
from tests.deploy.conftest import DEPLOY_NOTES, REPO_ROOT, compose_plugin

DOCKER = REPO_ROOT / "docker"
COMPOSE_FILES = sorted(DOCKER.glob("compose.*.yaml"))
SCHEMA_PATH = Path(__file__).with_name("compose_spec.json")
SCHEMA_SHA256 = "0dc04bd346dcfee1b1419628fff79937bbf076925f298f272a2b490e2b112bac"
ENV = {"JUPYTER_TOKEN": "test-token"}  # the one variable a stack requires (compose.jupyter.yaml)
GPU_STACKS = {"compose.00-prepare.yaml", "compose.03-service-gpu.yaml", "compose.04-triton.yaml",
              "compose.06a-all-backends.yaml", "compose.06b-multi-gpu.yaml", "compose.jupyter.yaml"}
# Outputs the stacks mount that are created on the node (git-ignored): export, staged repository, results.
GENERATED = {"artifacts", "models", "results"}


def _schema_validator():
    assert hashlib.sha256(SCHEMA_PATH.read_bytes()).hexdigest() == SCHEMA_SHA256, "vendored schema changed"
    schema = json.loads(SCHEMA_PATH.read_text())
    cls = jsonschema.validators.validator_for(schema)
    return cls(schema)


def test_every_lab_step_has_a_stack():
    names = {p.name for p in COMPOSE_FILES}
    for want in ("compose.02-service-cpu.yaml", "compose.03-service-gpu.yaml", "compose.04-triton.yaml",
                 "compose.06a-all-backends.yaml", "compose.06b-multi-gpu.yaml", "compose.jupyter.yaml",
                 "compose.perf-analyzer.yaml", "compose.00-prepare.yaml"):
        assert want in names


@pytest.mark.parametrize("path", COMPOSE_FILES, ids=lambda p: p.name)
def test_compose_file_matches_compose_spec(path):
    plugin = compose_plugin()
    if plugin:
        DEPLOY_NOTES.append(f"compose files validated with `docker compose config` ({plugin})")
        out = subprocess.run(["docker", "compose", "-f", str(path), "config", "-q"], capture_output=True, text=True,
                             env={"PATH": "/usr/bin:/bin", **ENV}, timeout=60)
        assert out.returncode == 0, out.stderr
    DEPLOY_NOTES.append("compose files validated against the Compose Specification JSON schema vendored from the "
                        "docker-compose 1.29.2 wheel (tests/deploy/COMPOSE_SPEC_PROVENANCE.md); no compose plugin here"
                        if not plugin else "compose files also validated against the vendored compose-spec schema")
    doc = load(path, env=ENV)  # interpolated as compose would, with defaults
    errors = sorted(_schema_validator().iter_errors(doc), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{'/'.join(map(str, e.path))}: {e.message}" for e in errors)


def test_schema_rejects_what_compose_rejects():
    """The validator is not a rubber stamp: typos and wrong types fail."""
    v = _schema_validator()
    assert list(v.iter_errors({"services": {"a": {"image": "x:1", "prots": ["1:1"]}}}))
    assert list(v.iter_errors({"services": {"a": {"image": "x:1", "deploy": {"resources": {"reservations": {
        "devices": [{"capabilities": "gpu", "count": 1.5}]}}}}}}))
    assert not list(v.iter_errors({"services": {"a": {"image": "x:1"}}}))


def test_interpolation_follows_compose_rules():
    env = {"SET": "v", "EMPTY": ""}
    assert interpolate("${SET:-d} ${UNSET:-d} ${EMPTY:-d} ${EMPTY-d} $$SET $SET", env) == "v d d  $SET v"
    with pytest.raises(InterpolationError, match="JUPYTER_TOKEN"):
        load(DOCKER / "compose.jupyter.yaml", env={})


@pytest.mark.parametrize("path", COMPOSE_FILES, ids=lambda p: p.name)
def test_images_pinned_builds_and_mounts_exist(path):
    doc = load(path, env=ENV)
    volumes_declared = set((doc.get("volumes") or {}).keys())
    for name, svc in doc["services"].items():
        image = svc.get("image", "")
        assert re.fullmatch(r"[\w./-]+:[\w.-]*\d[\w.-]*", image), f"{name}: image {image!r} needs a pinned version tag"
        assert not image.endswith(":latest")
        if "build" in svc:
            ctx = (path.parent / svc["build"]["context"]).resolve()
            assert ctx == REPO_ROOT, f"{name}: build context should be the repository root"
            assert (ctx / svc["build"]["dockerfile"]).is_file(), f"{name}: {svc['build']['dockerfile']} missing"
        for vol in svc.get("volumes") or []:
            src, target = vol.split(":")[:2]
            assert target.startswith("/")
            if src.startswith((".", "/")):
                host = (path.parent / src).resolve()
                rel = host.relative_to(REPO_ROOT)  # never outside the clone
                assert host.exists() or rel.parts[0] in GENERATED, f"{name}: mount source {src} does not exist"
            else:
                assert src in volumes_declared, f"{name}: named volume {src} not declared"


@pytest.mark.parametrize("path", [p for p in COMPOSE_FILES if p.name in GPU_STACKS], ids=lambda p: p.name)
def test_gpu_stacks_reserve_nvidia_gpus(path):
    doc = load(path, env=ENV)
    for name, svc in doc["services"].items():
        devices = svc["deploy"]["resources"]["reservations"]["devices"]
        assert devices and all(d["driver"] == "nvidia" and d["capabilities"] == ["gpu"] for d in devices), name
        assert all(("count" in d) != ("device_ids" in d) for d in devices), f"{name}: count or device_ids, not both"


def test_cpu_stack_requests_no_gpu():
    doc = load(DOCKER / "compose.02-service-cpu.yaml", env=ENV)
    assert "deploy" not in doc["services"]["service-cpu"]


TRITON_STACKS = ["compose.04-triton.yaml", "compose.06a-all-backends.yaml", "compose.06b-multi-gpu.yaml"]


@pytest.mark.parametrize("name", TRITON_STACKS)
def test_triton_stacks(name, gpu_trt_cache_path):
    doc = load(DOCKER / name, env=ENV)
    tri = doc["services"]["triton"]
    cmd = tri["command"]
    assert "--model-control-mode=explicit" in cmd and "--model-repository=/models" in cmd
    for flag, port in (("--http-port", 8000), ("--grpc-port", 8001), ("--metrics-port", 8002)):
        assert f"{flag}={port}" in cmd
    assert container_ports(doc)["triton"] == [8000, 8001, 8002]
    pub = {p: s for p, s in published_ports(doc).items() if s == "triton"}
    assert sorted(pub) == [NODE_PORTS["triton_http"], NODE_PORTS["triton_grpc"], NODE_PORTS["triton_metrics"]]
    mounts = {v.split(":")[1]: v.split(":")[0] for v in tri["volumes"]}
    assert mounts["/models"] == "../models"  # the repository `servelab triton stage --target gpu` writes
    # the TensorRT engine/timing cache path in the staged config is a named volume in the container
    assert mounts[gpu_trt_cache_path] in doc["volumes"]
    # preprocess_jpeg imports servelab from the path prepare_gpu.py stages into its config
    assert mounts["/opt/servelab/servelab"] == "../servelab"
    for v in tri["volumes"]:
        if v.split(":")[1] == "/models":
            assert v.endswith(":ro"), "Triton must not write into the staged repository"


def test_published_ports_match_the_lab_gpu_target(monkeypatch):
    """The lab's target=gpu endpoints (servelab.lab.targets) are the ports the stacks publish on the node."""
    targets = pytest.importorskip("servelab.lab.targets")
    for var in ("SERVELAB_GPU_HOST", "SERVELAB_GPU_SERVICE_PORT", "SERVELAB_GPU_TRITON_HTTP_PORT",
                "SERVELAB_GPU_TRITON_GRPC_PORT", "SERVELAB_GPU_TRITON_METRICS_PORT"):
        monkeypatch.delenv(var, raising=False)
    ep = targets.gpu_endpoints()
    assert ep.service_url.endswith(f":{NODE_PORTS['service']}")
    assert ep.triton_http_url.endswith(f":{NODE_PORTS['triton_http']}")
    assert ep.triton_grpc_url.endswith(f":{NODE_PORTS['triton_grpc']}")
    assert f":{NODE_PORTS['triton_metrics']}/" in ep.triton_metrics_url
    for name in ("compose.03-service-gpu.yaml", "compose.06a-all-backends.yaml"):
        doc = load(DOCKER / name, env=ENV)
        assert published_ports(doc)[NODE_PORTS["service"]] == "service-gpu"
        env = doc["services"]["service-gpu"]["environment"]
        assert env["SERVELAB_PORT"] == str(NODE_PORTS["service"])


def test_ports_bind_loopback_by_default():
    for path in COMPOSE_FILES:
        raw = yaml.safe_load(path.read_text())
        for name, svc in raw["services"].items():
            for p in svc.get("ports") or []:
                assert str(p).startswith("${SERVELAB_BIND:-127.0.0.1}:"), f"{path.name}/{name}: {p}"


def test_jupyter_runs_notebooks_with_target_gpu():
    doc = load(DOCKER / "compose.jupyter.yaml", env=ENV)
    lab = doc["services"]["lab"]
    assert lab["command"][:5] == ["servelab", "lab", "run", "--target", "gpu"]
    assert lab["network_mode"] == "host" and doc["services"]["jupyter"]["network_mode"] == "host"
    assert any("--IdentityProvider.token=test-token" == a for a in doc["services"]["jupyter"]["command"])
    assert "--ip=127.0.0.1" in doc["services"]["jupyter"]["command"]


def test_perf_analyzer_examples_name_real_models(gpu_models):
    text = (DOCKER / "compose.perf-analyzer.yaml").read_text()
    named = re.findall(r"perf_analyzer -m (\S+)", text)
    assert named and set(named) <= gpu_models
    assert load(DOCKER / "compose.perf-analyzer.yaml")["services"]["sdk"]["image"].endswith("-py3-sdk")


def test_every_referenced_compose_file_exists():
    """Docs, notebooks, scripts and code name compose files that exist (names drift when stacks are renamed)."""
    pattern = re.compile(r"compose\.[A-Za-z0-9_.-]+?\.yaml")
    have = {p.name for p in COMPOSE_FILES}
    sources = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "notebooks").glob("*.py")),
               *sorted((REPO_ROOT / "scripts").glob("*")), *sorted((REPO_ROOT / "servelab").rglob("*.py")),
               *sorted((REPO_ROOT / "docker").glob("*")), *sorted((REPO_ROOT / "k8s").rglob("*.yaml"))]
    stale = {f"{src.relative_to(REPO_ROOT)}: {name}" for src in sources if src.is_file()
             for name in pattern.findall(src.read_text(errors="replace")) if name not in have}
    assert not stale, sorted(stale)
