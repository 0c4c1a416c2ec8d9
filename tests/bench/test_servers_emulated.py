"""Servers started for a measurement on the emulated accelerator: every record they give names the emulated
device ("emulated <profile>"), so no figure measured on it passes for a model's."""

from __future__ import annotations

import pytest

from servelab.bench.experiments import measure
from servelab.bench.load import LoadOpts
from servelab.bench.results.records import Run
from servelab.bench.servers import served
from servelab.triton.models import EMULATED_ENCODER


@pytest.fixture
def flat_device(tmp_path, monkeypatch):
    monkeypatch.setenv("SERVELAB_DEVICE_PROFILE", "flat")
    monkeypatch.setenv("SERVELAB_DEVICE_DIR", str(tmp_path / "devices"))


@pytest.mark.parametrize("server", ["in-process", "fastapi", pytest.param("triton-http", marks=pytest.mark.triton)])
def test_records_measured_on_the_emulated_engine_name_the_device(server, flat_device, tmp_path, onnx_meta):
    run = Run(run_id="emulated", root=tmp_path / "results", weights="test")
    with served(server, engine="emulated", log_path=tmp_path / f"{server}.log") if server != "in-process" \
            else served(server, engine="emulated") as srv:
        rec = measure(run, "emulated", srv, payload="tensor", batch=2, opts=LoadOpts.smoke())
        if server == "triton-http":
            assert srv.model == EMULATED_ENCODER
    assert rec["engine"] == "emulated" and rec["errors"] == 0
    label = rec["provider"] if server == "in-process" else rec["params"]["device"]
    assert label == "emulated flat"
