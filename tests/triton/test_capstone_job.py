"""Notebook 09's job through a real tritonserver: the choices it may take from a run's records (gRPC or HTTP,
several requests in flight, the int8 graph) each embed every photo of a generated folder, and the encoder's own
graph is loaded back afterwards."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from servelab.dedup.evaluate import build_set
from servelab.lab import capstone
from servelab.lab.capstone import Choice, Pick
from servelab.triton.control import config_dict, get_config
from servelab.triton.models import CPU_ENCODER, ENSEMBLE

pytestmark = pytest.mark.triton


@pytest.mark.parametrize("protocol, engine, workers", [("grpc", "onnx-int8", 2), ("http", "onnx", 3)])
def test_the_job_embeds_every_photo_through_the_chosen_triton_path(triton, tmp_path, protocol, engine, workers):
    lab = SimpleNamespace(triton_http_url=triton.http_url, triton_grpc_url=triton.grpc_url, triton_model=CPU_ENCODER,
                          triton_jpeg_model=ENSEMBLE)
    folder = tmp_path / "photos"
    files = len(build_set(folder, n_base=2, n_negatives=2, size=128))
    own = config_dict(get_config(triton.http_url, CPU_ENCODER))
    choice = Choice(Pick("triton", ""), Pick(protocol, ""), Pick(4, ""), Pick(workers, ""), Pick(engine, ""))
    with capstone.serving(choice, lab, tmp_path) as client:
        if engine != "onnx":  # the encoder runs the int8 file while the job runs
            onnx_file = config_dict(get_config(triton.http_url, CPU_ENCODER))["parameters"]["onnx_file"]
            assert onnx_file["string_value"].endswith(".int8.onnx")
        job = capstone.timed_job(folder, tmp_path / "catalog.sqlite", client, batch=4, workers=workers)
    assert (job["report"].embedded, job["report"].failed) == (files, 0)
    assert job["groups"] and 0 < job["embed_s"] < job["total_s"]
    assert config_dict(get_config(triton.http_url, CPU_ENCODER))["parameters"] == own["parameters"]
