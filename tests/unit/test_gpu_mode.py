"""The embedded stack's GPU switch, checked where no GPU is: `--device cuda` is refused before anything starts
with CUDA's own reason, the gpu profile needs a GPU to measure, and the stack's GPU limits follow its batches.
What needs a GPU runs in tests/gpu (`pytest -m gpu`)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from servelab.config import Settings
from servelab.lab import params
from servelab.lab.cli import app
from servelab.lab.places import in_process_provider
from servelab.lab.stack import GPU_MAX_BATCH, service_env, stack_device
from servelab.model.providers import provider_check

no_cuda = pytest.mark.skipif(provider_check("cuda").usable, reason="CUDA runs on this machine")


def test_cpu_stack_stays_on_the_cpu():
    assert stack_device(Settings(provider="cpu")) == "cpu" and service_env("cpu") == {}


@no_cuda
@pytest.mark.parametrize("engine", ["onnx", "torch"])
def test_cuda_stack_is_refused_with_the_reason_where_cuda_cannot_run(engine):
    with pytest.raises(RuntimeError, match="cannot run on the GPU here: .*CUDAExecutionProvider"):
        stack_device(Settings(provider="cuda", engine=engine))


def test_gpu_stack_limits_follow_the_gpu_profile():
    env = service_env("cuda")
    gpu = params.profile("gpu")
    assert max(gpu["batch_sizes"]) == GPU_MAX_BATCH == env["SERVELAB_MAX_BATCH"] == env["SERVELAB_MAX_IMAGES"]
    assert max(gpu["concurrency_levels"]) == 128 and env["SERVELAB_MAX_QUEUE"] >= 128
    assert set(gpu) == set(params.profile("default"))  # every notebook finds its knobs


def test_gpu_profile_without_a_gpu_place_is_refused(monkeypatch):
    monkeypatch.delenv("SERVELAB_PLACE", raising=False)
    result = CliRunner().invoke(app, ["run", "--profile", "gpu", "--only", "03"])
    assert result.exit_code != 0 and "add --device cuda" in result.output


def test_unknown_device_is_refused():
    result = CliRunner().invoke(app, ["run", "--device", "tpu", "--only", "03"])
    assert result.exit_code != 0 and "--device must be cpu or cuda" in result.output


@no_cuda
def test_local_in_process_rows_use_the_gpu_only_when_asked_and_able(monkeypatch):
    monkeypatch.setenv("SERVELAB_PROVIDER", "cuda")
    assert in_process_provider("local") == "cpu"  # asked for, but CUDA cannot run here
    monkeypatch.setenv("SERVELAB_PROVIDER", "cpu")
    assert in_process_provider("local") == "cpu"
