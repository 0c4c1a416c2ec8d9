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
# the variables a stack requires: JupyterLab's token (compose.jupyter.yaml) and Triton's key (the Triton stacks)
ENV = {"JUPYTER_TOKEN": "test-token", "SERVELAB_TRITON_KEY": "test-key"}
TRITON_STACKS = ["compose.04-triton.yaml", "compose.06a-all-backends.yaml", "compose.06b-multi-gpu.yaml"]
GPU_STACKS = {"compose.03-service-gpu.yaml", "compose.04-triton.yaml", "compose.06a-all-backends.yaml",
              "compose.06b-multi-gpu.yaml", "compose.jupyter.yaml"}
# The one mount from outside the clone: the weights checkpoint (SERVELAB_CHECKPOINT), /dev/null when unset.
CHECKPOINT_IN_CONTAINER = "/opt/servelab-checkpoint/model.pt"
SERVELAB_IMAGES = {"docker/Dockerfile", "docker/Dockerfile.gpu", "docker/Dockerfile.lab"}
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
            if target == CHECKPOINT_IN_CONTAINER:
                assert src == "/dev/null" and vol.endswith(":ro"), f"{name}: {vol}"
                continue
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


def test_cpu_stacks_and_prepare_request_no_gpu():
    """prepare exports on the CPU and stages no GPU ids, so it needs no device (and runs while GPUs are busy)."""
    for name in ("compose.02-service-cpu.yaml", "compose.00-prepare.yaml", "compose.lab.yaml"):
        for svc in load(DOCKER / name, env=ENV)["services"].values():
            assert "deploy" not in svc, name


def _servelab_services(env=ENV):
    """(file, service name, service) for every container built from a servelab image."""
    for path in COMPOSE_FILES:
        for name, svc in load(path, env=env)["services"].items():
            if svc.get("build", {}).get("dockerfile") in SERVELAB_IMAGES:
                yield path.name, name, svc


def test_every_servelab_container_sees_the_same_weights(tmp_path, monkeypatch):
    """The service's preflight, the lab container and prepare (whose export Triton serves) must agree on the
    weights: every servelab container gets the same SERVELAB_PRETRAINED / SERVELAB_CHECKPOINT / SERVELAB_SEED."""
    from servelab.config import Settings
    from servelab.model.weights import weights_label

    checkpoint = tmp_path / "my-finetune.pt"
    checkpoint.write_bytes(b"not really a checkpoint, but hashed the same way everywhere")
    for env, expect in (({"SERVELAB_PRETRAINED": "laion2b_s34b_b79k"}, "pretrained (laion2b_s34b_b79k)"),
                        ({"SERVELAB_SEED": "7"}, "random-init (seed 7)"),
                        ({"SERVELAB_CHECKPOINT": str(checkpoint)}, "checkpoint (model.pt")):
        seen = {}
        for file, name, svc in _servelab_services({**ENV, **env}):
            cenv = {k: str(v) for k, v in svc["environment"].items() if k.startswith("SERVELAB_")}
            if "SERVELAB_CHECKPOINT" in env:
                assert cenv["SERVELAB_CHECKPOINT"] == CHECKPOINT_IN_CONTAINER, name
                assert f"{checkpoint}:{CHECKPOINT_IN_CONTAINER}:ro" in svc["volumes"], name
                mounted = tmp_path / "container" / Path(CHECKPOINT_IN_CONTAINER).name  # what the mount shows
                mounted.parent.mkdir(exist_ok=True)
                mounted.write_bytes(checkpoint.read_bytes())
                cenv["SERVELAB_CHECKPOINT"] = str(mounted)
            with monkeypatch.context() as m:
                for var in [v for v in __import__("os").environ if v.startswith("SERVELAB_")]:
                    m.delenv(var)
                for k, v in cenv.items():
                    m.setenv(k, v)
                seen[f"{file}/{name}"] = weights_label(Settings.from_env())
        assert {"compose.00-prepare.yaml/prepare", "compose.03-service-gpu.yaml/service-gpu",
                "compose.jupyter.yaml/lab", "compose.jupyter.yaml/jupyter", "compose.lab.yaml/lab"} <= set(seen)
        assert len(set(seen.values())) == 1 and next(iter(seen.values())).startswith(expect), seen


def test_containers_that_are_not_the_service_have_their_own_healthcheck():
    """The GPU image's HEALTHCHECK probes the service port; jupyter, lab and prepare are not the service, and
    with host networking would probe whatever answers on the node's 8080 (or nothing): `up --wait` fails."""
    for file, name, svc in _servelab_services():
        runs_service = "command" not in svc and "entrypoint" not in svc
        if runs_service:
            continue
        check = svc.get("healthcheck")
        assert check, f"{file}/{name}: overrides the command but inherits the image's HEALTHCHECK"
        if check.get("disable"):
            continue
        probe = " ".join(check["test"])
        assert "8888" in probe and "8080" not in probe, f"{file}/{name}: {probe}"


def test_gpu_ids_staged_agree_with_the_devices_each_stack_reserves(tmp_path, onnx_meta):
    """Inside a container the reserved devices are renumbered 0..k-1; every GPU id a staged config names must be
    one of those, for every stack that serves the staged repository and any SERVELAB_TRITON_GPU choice."""
    from servelab.triton.repository import parse_config, stage

    repo = tmp_path / "models"
    stage("gpu", out=repo, instances=2)  # what compose.00-prepare.yaml runs
    named = {int(g) for cfg in (parse_config(p) for p in repo.glob("*/config.pbtxt"))
             for group in cfg.instance_group for g in group.gpus}
    for name in TRITON_STACKS:
        for env in ({}, {"SERVELAB_TRITON_GPU": "1"}, {"SERVELAB_TRITON_GPU": "3"}):
            [device] = load(DOCKER / name, env={**ENV, **env})["services"]["triton"]["deploy"]["resources"][
                "reservations"]["devices"]
            visible = None if device.get("count") == "all" else len(device["device_ids"])
            assert visible is None or named <= set(range(visible)), (name, env, named)
    assert named == set()  # no ids at all: Triton places instances on every GPU the container sees


GPU_KNOB = re.compile(r"SERVELAB_[A-Z_]*GPU[A-Z_]*")


def test_every_gpu_knob_is_documented():
    """Each SERVELAB_*GPU* variable the stacks, scripts or lab read is explained on the GPU node's page."""
    gpu_section = (REPO_ROOT / "docs" / "GPU_NODE.md").read_text()
    used = set()
    for src in [*DOCKER.glob("*"), *(REPO_ROOT / "scripts").glob("*"), *(REPO_ROOT / "servelab" / "lab").glob("*.py"),
                *(REPO_ROOT / "servelab" / "provision").glob("*.py")]:
        if src.is_file():
            used |= set(GPU_KNOB.findall(src.read_text(errors="replace")))
    assert used, "no GPU knobs found: the scan is broken"
    undocumented = sorted(k for k in used if k not in gpu_section)
    assert not undocumented, f"docs/GPU_NODE.md does not explain {undocumented}"


SHOWN_COMPOSE = re.compile(r"((?:\b[A-Z][A-Z0-9_]*=\S+\s+)+)docker compose -f (?:\S*/)?(compose\.[\w.-]+\.yaml)")


def test_shown_commands_set_only_variables_the_compose_file_reads():
    """`VAR=… docker compose -f docker/compose.X.yaml …` in docs and notebooks: X must read VAR."""
    sources = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md")),
               *sorted((REPO_ROOT / "notebooks").glob("*.py")), *DOCKER.glob("*.yaml"),
               *(REPO_ROOT / "scripts").glob("*"), *(REPO_ROOT / "k8s").rglob("*.yaml")]
    found = 0
    for src in (p for p in sources if p.is_file()):  # not scripts/__pycache__, where a test imported a script
        for assigns, file in SHOWN_COMPOSE.findall(src.read_text(errors="replace")):
            raw = (DOCKER / file).read_text()
            for var in re.findall(r"\b([A-Z][A-Z0-9_]*)=", assigns):
                found += 1
                assert re.search(r"\$\{?" + var + r"\b", raw), f"{src.name}: {var}=… has no effect on {file}"
    assert found, "no shown compose command with variables found: the scan is broken"


def test_cpu_lab_container_runs_anywhere():
    """The any-OS path: a Linux x86_64 container with the pinned CPU lab set; no GPU, no host networking
    (Docker Desktop on macOS/Windows has none), JupyterLab published on loopback, the clone mounted."""
    import sysconfig

    doc = load(DOCKER / "compose.lab.yaml", env=ENV)
    lab = doc["services"]["lab"]
    assert "network_mode" not in lab and "deploy" not in lab
    assert published_ports(doc) == {8888: "lab"}
    assert "..:/opt/servelab" in lab["volumes"]
    assert lab["command"][:2] == ["jupyter", "lab"] and "--ip=0.0.0.0" in lab["command"]
    # the bundled tritonserver ships for one platform: the image must be that platform everywhere
    import importlib.metadata as md

    wheel = md.distribution("nvidia-pytriton").read_text("WHEEL") or ""
    arch = "amd64" if "x86_64" in wheel else "arm64"
    assert lab["platform"] == f"linux/{arch}"
    dockerfile = (DOCKER / "Dockerfile.lab").read_text()
    assert "-r /tmp/requirements.txt" in dockerfile and "COPY requirements.txt" in dockerfile  # the same pins
    assert "-r /tmp/requirements-test.txt" in dockerfile  # notebooks 02 and 08 run the deploy checks with pytest
    py = re.search(r"^FROM python:(\d+\.\d+)", dockerfile, re.M).group(1)
    assert py == sysconfig.get_python_version(), "pytriton's backend stubs are per Python version"
    readme = (REPO_ROOT / "README.md").read_text()
    assert "docker compose -f docker/compose.lab.yaml up" in readme


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
    assert mounts["/models"] == "../models"  # the repository `servelab triton stage --flavour gpu` writes
    # the TensorRT engine/timing cache path in the staged config is a named volume in the container
    assert mounts[gpu_trt_cache_path] in doc["volumes"]
    # preprocess_jpeg imports servelab from the path prepare_gpu.py stages into its config
    assert mounts["/opt/servelab/servelab"] == "../servelab"
    for v in tri["volumes"]:
        if v.split(":")[1] == "/models":
            assert v.endswith(":ro"), "Triton must not write into the staged repository"


def test_published_ports_match_the_lab_node_place(monkeypatch):
    """The lab's place=node endpoints (servelab.lab.places) are the ports the stacks publish on the node."""
    from servelab.lab import places

    for var in ("SERVELAB_NODE_HOST", "SERVELAB_NODE_SERVICE_PORT", "SERVELAB_NODE_TRITON_HTTP_PORT",
                "SERVELAB_NODE_TRITON_GRPC_PORT", "SERVELAB_NODE_TRITON_METRICS_PORT"):
        monkeypatch.delenv(var, raising=False)
    ep = places.node_endpoints()
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
    """SERVELAB_BIND may publish the service and JupyterLab elsewhere; Triton's ports stay on loopback whatever it
    says (its model control loads code)."""
    for path in COMPOSE_FILES:
        raw = yaml.safe_load(path.read_text())
        for name, svc in raw["services"].items():
            for p in svc.get("ports") or []:
                want = "127.0.0.1:" if name == "triton" else "${SERVELAB_BIND:-127.0.0.1}:"
                assert str(p).startswith(want), f"{path.name}/{name}: {p}"


@pytest.mark.parametrize("name", TRITON_STACKS)
def test_triton_ports_stay_on_loopback_when_the_service_is_published(name):
    doc = load(DOCKER / name, env={**ENV, "SERVELAB_BIND": "0.0.0.0"})
    for svc_name, svc in doc["services"].items():
        for p in svc.get("ports") or []:
            assert str(p).startswith("127.0.0.1:") == (svc_name == "triton"), (svc_name, p)


@pytest.mark.parametrize("name", TRITON_STACKS)
def test_triton_stacks_restrict_model_control_to_the_key_from_docker_env(name):
    """The restricted APIs and the header are the embedded server's own (servelab.triton.access), and the key is
    the one the bootstrap writes into docker/.env; without it the stack does not start."""
    from servelab.triton import access

    cmd = load(DOCKER / name, env=ENV)["services"]["triton"]["command"]
    restricted = [a for a in cmd if "restricted" in a]
    assert restricted == access.server_args("test-key")
    assert {"model-repository", "shared-memory", "logging", "trace"} <= set(access.RESTRICTED)
    with pytest.raises(InterpolationError, match="SERVELAB_TRITON_KEY"):
        load(DOCKER / name, env={"JUPYTER_TOKEN": "t"})


def test_the_node_lab_containers_get_tritons_key():
    doc = load(DOCKER / "compose.jupyter.yaml", env=ENV)
    for svc in doc["services"].values():
        assert svc["environment"]["SERVELAB_TRITON_KEY"] == "test-key"
    assert load(DOCKER / "compose.jupyter.yaml", env={"JUPYTER_TOKEN": "t"})["services"]["lab"]["environment"][
        "SERVELAB_TRITON_KEY"] == ""  # JupyterLab alone needs no Triton


def test_jupyter_runs_notebooks_with_place_node():
    doc = load(DOCKER / "compose.jupyter.yaml", env=ENV)
    lab = doc["services"]["lab"]
    assert lab["command"][:5] == ["servelab", "lab", "run", "--place", "node"]
    for svc in doc["services"].values():  # a notebook opened in the node's JupyterLab starts at place=node
        assert svc["environment"]["SERVELAB_PLACE"] == "node"
    assert lab["network_mode"] == "host" and doc["services"]["jupyter"]["network_mode"] == "host"
    assert doc["services"]["jupyter"]["environment"]["JUPYTER_TOKEN"] == "test-token"  # from the environment:
    assert not any("token" in a.lower() for a in doc["services"]["jupyter"]["command"])  # ps shows a command line
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
    sources = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md")),
               *sorted((REPO_ROOT / "notebooks").glob("*.py")), *sorted((REPO_ROOT / "scripts").glob("*")),
               *sorted((REPO_ROOT / "servelab").rglob("*.py")),
               *sorted((REPO_ROOT / "docker").glob("*")), *sorted((REPO_ROOT / "k8s").rglob("*.yaml"))]
    stale = {f"{src.relative_to(REPO_ROOT)}: {name}" for src in sources if src.is_file()
             for name in pattern.findall(src.read_text(errors="replace")) if name not in have}
    assert not stale, sorted(stale)
