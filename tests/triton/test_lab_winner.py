"""Deploying notebook 05a's winner: int8 wins where the CPU has VNNI or where the run ranked it ahead; a second
service gets the lab service's settings; Triton's CPU encoder, pointed at the int8 graph through a real
tritonserver's repository API, serves embeddings close to fp32's and gets its own graph back afterwards."""

from __future__ import annotations

import numpy as np
import pytest

from servelab.bench.results.records import Run
from servelab.client import InferenceClient
from servelab.lab.winner import (
    beside_in_process,
    drift_record,
    graph_config,
    graph_switch,
    service_settings,
    winner,
)
from servelab.triton.control import get_config
from servelab.vocabulary import Engine

ENCODER = "openclip_vit_b32_cpu"
INT8_AHEAD = {"kind": "ab", "a": "int8", "b": "fp32", "ratio": 1.5, "ratio_min": 1.4, "ratio_max": 1.6, "repeats": 5}
TOO_CLOSE = {**INT8_AHEAD, "ratio": 1.02, "ratio_min": 0.9, "ratio_max": 1.1}


def test_int8_wins_where_the_cpu_has_vnni_whatever_the_ratio():
    won = winner(["avx512_vnni"], TOO_CLOSE)
    assert won.engine == Engine.ONNX_INT8 and won.deploys and "avx512_vnni" in won.why


def test_without_vnni_int8_wins_only_when_ranked_ahead():
    assert winner([], INT8_AHEAD).engine == Engine.ONNX_INT8
    stays = winner([], TOO_CLOSE)
    assert stays.engine == Engine.ONNX and not stays.deploys


@pytest.mark.parametrize("served, said", [((2.13, 2.11, 2.15), "smaller than"), ((2.9, 2.8, 3.1), "larger than"),
                                           ((2.1, 1.6, 2.7), "within the range of")])
def test_the_served_lead_is_read_against_the_in_process_one_by_their_ranges(served, said):
    rec = lambda v, lo, hi: {"ratio": v, "ratio_min": lo, "ratio_max": hi}  # noqa: E731
    assert beside_in_process(rec(*served), rec(2.66, 2.2, 2.75)) == said


def test_a_served_lead_without_a_spread_is_not_ranked_against_the_in_process_one():
    """A smoke run's single pair once read "smaller than" section 0's single round."""
    one = {"ratio": 1.54, "ratio_min": 1.54, "ratio_max": 1.54, "repeats": 1}
    assert beside_in_process(one, {"ratio": 4.37, "ratio_min": 4.37, "ratio_max": 4.37, "repeats": 1}) == \
        "not to be ranked against"


def test_a_second_service_gets_the_lab_services_settings(settings):
    assert service_settings(settings) == {"max_batch": settings.max_batch, "max_delay_ms": settings.max_delay_ms,
                                          "max_queue": settings.max_queue, "threads": settings.threads}


def test_drift_record_keeps_the_distance_from_one(tmp_path):
    run = Run(run_id="drift", root=tmp_path)
    a = np.eye(3, 8, dtype=np.float32)
    b = a.copy()
    b[0, 1] = 0.01
    rec = drift_record(run, "05a-deploy-drift", "fastapi", Engine.ONNX_INT8, b, a)
    assert rec["kind"] == "derived" and rec["batch"] == 3
    assert rec["value"] < 1.0 and rec["one_minus_cosine_max"] == pytest.approx(1 - rec["value"])
    assert run.records[-1]["experiment"] == "05a-deploy-drift"


@pytest.mark.triton
def test_graph_config_refuses_a_missing_file_or_a_model_without_onnx_file(triton, tmp_path, onnx_meta):
    with pytest.raises(FileNotFoundError, match="no such ONNX file"):
        graph_config(triton.http_url, ENCODER, tmp_path / "absent.onnx")
    with pytest.raises(ValueError, match="onnx_file"):
        graph_config(triton.http_url, "preprocess_jpeg", onnx_meta["int8"]["path"])


@pytest.mark.triton
def test_triton_serves_the_int8_graph_then_its_own(triton, onnx_meta, jpegs):
    def embed():
        with InferenceClient(mode="remote", backend="triton-http", url=triton.http_url, payload="tensor",
                             model=ENCODER) as client:
            return client.embed_images(jpegs)

    fp32 = embed()
    with graph_switch(triton.http_url, ENCODER, onnx_meta["int8"]["path"]) as use:
        assert use(0) is True
        params = get_config(triton.http_url, ENCODER)["parameters"]
        assert params["onnx_file"]["string_value"].endswith(".int8.onnx")
        int8 = embed()
    assert get_config(triton.http_url, ENCODER)["parameters"]["onnx_file"]["string_value"] == "model.onnx"
    cos = (int8 * fp32).sum(axis=1)
    assert cos.min() > 0.99 and not np.array_equal(int8, fp32)
    assert np.allclose(embed(), fp32, atol=1e-5)
