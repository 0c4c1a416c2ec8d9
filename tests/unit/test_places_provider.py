"""servelab.lab.places picks the in-process provider at the node by a session that ran, not by the build's list:
onnxruntime-gpu lists CUDA on a machine whose GPU cannot be used, and notebooks 01/05a then crashed."""

from __future__ import annotations

import onnxruntime as ort
import pytest

from servelab.lab.places import in_process_note, in_process_provider
from servelab.lab.step import Step
from servelab.model.providers import provider_check


@pytest.fixture
def cuda_listed_but_unusable(monkeypatch):
    """This machine's real onnxruntime, listing CUDA the way onnxruntime-gpu does on a box without a usable GPU."""
    real = ort.get_available_providers()
    monkeypatch.setattr(ort, "get_available_providers", lambda: ["CUDAExecutionProvider", *real])
    provider_check.cache_clear()
    yield
    provider_check.cache_clear()


def test_listed_but_unusable_cuda_gives_cpu_rows(cuda_listed_but_unusable, onnx_meta, settings):
    from servelab.model.engines import make_embedder

    provider = in_process_provider("node")
    assert provider == "cpu"
    emb = make_embedder(settings, engine="onnx", provider=provider)  # what 01 serves in-process: it runs
    assert emb.active_providers[0] == "CPUExecutionProvider"


def test_the_fallback_is_said_with_the_engine_reason(cuda_listed_but_unusable, tmp_path):
    step = Step("98", tmp_path / "run", "node")
    in_process_note(step, "node", in_process_provider("node"), "the op-type profile", engine="onnx")
    [entry] = step._not_run
    assert "not CUDAExecutionProvider" in entry["why"] and "CPU" in entry["why"]


def test_local_place_never_asks_for_the_gpu():
    assert in_process_provider("local") == in_process_provider("local", "torch") == "cpu"
