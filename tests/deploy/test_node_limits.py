"""The node's stacks admit what every lab profile sends: the prepare step writes the profile's limits into
docker/.env, every compose file hands them to the service, and Triton is staged with the profile's largest batch
(`--place node --profile gpu` sends batches of 256 and 128 clients at once)."""

from __future__ import annotations

import importlib.util
import math
import os
import stat

import pytest

from servelab.config import Settings
from servelab.lab.params import LAB_PROFILES, largest_batch, most_clients, stack_limits
from servelab.model.contract import INPUT_SHAPE
from servelab.provision.compose import load
from servelab.triton.repository import parse_config
from tests.deploy.conftest import REPO_ROOT

DOCKER = REPO_ROOT / "docker"
ENV = {"JUPYTER_TOKEN": "test-token", "SERVELAB_TRITON_KEY": "test-key"}  # what the bootstrap puts in docker/.env
SERVICE_STACKS = {"compose.02-service-cpu.yaml", "compose.03-service-gpu.yaml", "compose.06a-all-backends.yaml"}


def _prepare():
    """docker/prepare_gpu.py, the prepare step's script, as a module."""
    spec = importlib.util.spec_from_file_location("prepare_gpu", DOCKER / "prepare_gpu.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _dotenv(path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line and line[0] != "#")


def _service_settings(environment: dict, monkeypatch) -> Settings:
    """The settings the service in a container reads from the environment compose gives it."""
    with monkeypatch.context() as m:
        for var in [v for v in os.environ if v.startswith("SERVELAB_")]:
            m.delenv(var)
        for k, v in environment.items():
            if k.startswith("SERVELAB_"):
                m.setenv(k, str(v))
        return Settings.from_env()


def _node_env_file(tmp_path, name: str):
    """docker/.env as the bootstrap leaves it (weights, Triton's key, JupyterLab's token), after the prepare step
    of lab profile `name`."""
    env_file = tmp_path / ".env"
    env_file.write_text("SERVELAB_SEED=0\nSERVELAB_TRITON_KEY=test-key\nJUPYTER_TOKEN=test-token\n")
    env_file.chmod(0o600)
    _prepare().write_limits(env_file, stack_limits(name).service_env())
    return env_file


@pytest.mark.parametrize("name", list(LAB_PROFILES))
def test_every_node_service_admits_what_the_profile_sends(name, tmp_path, monkeypatch):
    env_file = _node_env_file(tmp_path, name)
    dotenv = _dotenv(env_file)
    assert dotenv["SERVELAB_TRITON_KEY"] == "test-key" and dotenv["JUPYTER_TOKEN"] == "test-token"  # kept
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
    batch, clients = largest_batch(name), most_clients(name)
    seen = set()
    for path in sorted(DOCKER.glob("compose.*.yaml")):
        for service, svc in load(path, env={**ENV, **dotenv})["services"].items():
            if "SERVELAB_PORT" not in (svc.get("environment") or {}):
                continue
            seen.add(path.name)
            s, where = _service_settings(svc["environment"], monkeypatch), f"{path.name}/{service}"
            assert s.max_images_per_request >= batch, f"{where}: {s.max_images_per_request} images a request < {batch}"
            assert s.in_flight_limit == 0 or s.in_flight_limit >= clients, f"{where}: {s.in_flight_limit} in flight"
            assert s.always_admit >= clients, f"{where}: {s.always_admit} admitted whatever their wait"
            assert s.max_queue >= max(batch, clients), f"{where}: {s.max_queue} images may wait"
            assert s.max_body_bytes >= batch * math.prod(INPUT_SHAPE) * 4, f"{where}: body {s.max_body_bytes} B"
    assert seen == SERVICE_STACKS


@pytest.mark.parametrize("name", list(LAB_PROFILES))
def test_the_prepare_step_stages_triton_for_the_profiles_largest_batch(name, onnx_meta, settings, tmp_path,
                                                                       monkeypatch):
    prepare = _prepare()
    monkeypatch.setattr(prepare, "ENV_FILE", tmp_path / "docker.env")
    for var in ("SERVELAB_TRITON_MAX_BATCH", "SERVELAB_TRITON_FLAVOUR", "SERVELAB_INSTANCES"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("SERVELAB_LAB_PROFILE", name)
    monkeypatch.setenv("SERVELAB_HOME", str(tmp_path))  # models/ here, not in the checkout
    monkeypatch.setenv("SERVELAB_ARTIFACTS", str(settings.artifacts))  # the export the session made
    assert prepare.main() == 0
    configs = {p.parent.name: parse_config(p) for p in (tmp_path / "models").glob("*/config.pbtxt")}
    assert configs
    for model, cfg in configs.items():
        if cfg.max_batch_size:  # the ensemble's members and the encoders alike
            assert cfg.max_batch_size >= largest_batch(name), f"{model}: max_batch_size {cfg.max_batch_size}"
    assert _dotenv(tmp_path / "docker.env") == stack_limits(name).service_env()
