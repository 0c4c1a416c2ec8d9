"""The checks that send a student's request to a running server: one JPEG to the ensemble of a real embedded
tritonserver, a configuration loaded into it with the repository API, a PromQL query put to a real Prometheus
that scraped a real service. Each accepts a working answer, rejects plausible wrong ones with a hint, and
reports a stub as `not implemented`."""

from __future__ import annotations

import json

import numpy as np
import pytest

from servelab.assignments import checks
from servelab.assignments.result import FAIL, NOT_IMPLEMENTED, NOT_RUN, PASS, STRICT_ENV
from servelab.bench.load.inputs import sample_jpegs
from servelab.triton.models import CPU_ENCODER, ENSEMBLE


@pytest.fixture(autouse=True)
def _not_strict(monkeypatch):
    monkeypatch.delenv(STRICT_ENV, raising=False)


def stub(*args):
    raise NotImplementedError("exercise t: write it")


# --- one JPEG to the ensemble ---------------------------------------------------------------------------------

def embed_jpeg(url, model, jpeg):
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(url)
    image = httpclient.InferInput("IMAGE", [1, 1], "BYTES")
    image.set_data_from_numpy(np.array([[jpeg]], dtype=object))
    return client.infer(model, [image]).as_numpy("embedding")


@pytest.mark.triton
def test_triton_jpeg_call(assignments_jpeg_triton):
    from servelab.client import InferenceClient

    triton = assignments_jpeg_triton
    photo, other = sample_jpegs(2, seed=11)
    with InferenceClient(mode="remote", backend="triton-http", url=triton.http_url, payload="tensor",
                         model=CPU_ENCODER) as own:
        kw = dict(triton_http_url=triton.http_url, model=ENSEMBLE, photo=photo, embed_images=own.embed_images,
                  exercise="t")
        r = checks.triton_jpeg_call(embed_jpeg, **kw)
        assert r.status == PASS, r.message
        r = checks.triton_jpeg_call(lambda u, m, j: embed_jpeg(u, m, other), **kw)  # another photo's bytes
        assert r.status == FAIL and "differs" in r.message and "bytes" in r.message
        r = checks.triton_jpeg_call(lambda u, m, j: embed_jpeg(u, m, j)[0], **kw)  # one vector, not [1, 512]
        assert r.status == FAIL and "one row per image" in r.message

        def flat_shape(url, model, jpeg):  # IMAGE sent as [1]: Triton refuses it, the check says why
            import tritonclient.http as httpclient

            image = httpclient.InferInput("IMAGE", [1], "BYTES")
            image.set_data_from_numpy(np.array([jpeg], dtype=object))
            return httpclient.InferenceServerClient(url).infer(model, [image]).as_numpy("embedding")

        r = checks.triton_jpeg_call(flat_shape, **kw)
        assert r.status == FAIL and "Triton refused" in r.message and "[1, 1]" in r.message, r.message
        assert checks.triton_jpeg_call(stub, **kw).status == NOT_IMPLEMENTED


# --- a configuration loaded by hand ---------------------------------------------------------------------------

def load_config(client, model, config_text, headers):
    from servelab.lab.config_text import as_json

    client.load_model(model, config=as_json(config_text), headers=headers)


@pytest.mark.triton
def test_loaded_config(assignments_triton):
    from servelab.lab.config_text import as_json, edited
    from servelab.triton.control import load_model

    triton = assignments_triton
    staged = (triton.repository / CPU_ENCODER / "config.pbtxt").read_text()
    mine = edited(staged, 'instance_group [ { kind: KIND_CPU, count: 2 } ]\n'
                          'parameters { key: "intra_op_threads", value: { string_value: "1" } }')
    kw = dict(triton_http_url=triton.http_url, model=CPU_ENCODER, config_text=mine, exercise="t")
    try:
        r = checks.loaded_config(lambda c, m, t: load_config(c, m, t, triton.headers), **kw)
        assert r.status == PASS, r.message
        assert r.detail["instances"] == 2 and r.detail["intra_op_threads"] == "1"
        load_model(triton.http_url, CPU_ENCODER, json.loads(as_json(staged)))  # the file's config again
        r = checks.loaded_config(lambda c, m, t: load_config(c, m, t, {}), **kw)  # no key: refused
        assert r.status == FAIL and "headers=lab.triton_headers" in r.message, r.message
        r = checks.loaded_config(lambda c, m, t: c.load_model(m, headers=triton.headers), **kw)  # no config sent
        assert r.status == FAIL and "without `config`" in r.message, r.message
        other = edited(staged, 'instance_group [ { kind: KIND_CPU, count: 3 } ]')
        r = checks.loaded_config(lambda c, m, t: load_config(c, m, other, triton.headers), **kw)  # not the edit
        assert r.status == FAIL and "not what your configuration asks for" in r.message, r.message
        assert checks.loaded_config(stub, **kw).status == NOT_IMPLEMENTED
        r = checks.loaded_config(stub, **{**kw, "config_text": None}, unavailable="the encoder runs on a GPU")
        assert r.status == NOT_RUN and "GPU" in r.message
    finally:
        load_model(triton.http_url, CPU_ENCODER, json.loads(as_json(staged)))


# --- a graph deployed by hand (05a.4) --------------------------------------------------------------------------

def deploy_graph(client, model, onnx_path, headers):
    config = client.get_model_config(model)
    config["parameters"]["onnx_file"] = {"string_value": str(onnx_path)}
    client.load_model(model, config=json.dumps(config), headers=headers)


@pytest.mark.triton
def test_graph_loaded(assignments_triton, onnx_meta):
    from servelab.triton.control import get_config

    triton = assignments_triton
    own = get_config(triton.http_url, CPU_ENCODER)["parameters"]["onnx_file"]["string_value"]
    kw = dict(triton_http_url=triton.http_url, model=CPU_ENCODER, onnx_path=onnx_meta["int8"]["path"], exercise="t")
    r = checks.graph_loaded(lambda c, m, p: deploy_graph(c, m, p, triton.headers), **kw)
    assert r.status == PASS, r.message
    assert get_config(triton.http_url, CPU_ENCODER)["parameters"]["onnx_file"]["string_value"] == own  # put back
    r = checks.graph_loaded(lambda c, m, p: deploy_graph(c, m, p, {}), **kw)  # no key: refused
    assert r.status == FAIL and "headers=lab.triton_headers" in r.message, r.message
    r = checks.graph_loaded(lambda c, m, p: c.load_model(m, headers=triton.headers), **kw)  # no config sent
    assert r.status == FAIL and "without `config`" in r.message, r.message

    def more_instances(client, model, onnx_path):  # the graph, and a setting the exercise did not ask for
        config = client.get_model_config(model)
        config["parameters"]["onnx_file"] = {"string_value": str(onnx_path)}
        config["instance_group"] = [{"kind": "KIND_CPU", "count": 2}]
        client.load_model(model, config=json.dumps(config), headers=triton.headers)

    r = checks.graph_loaded(more_instances, **kw)
    assert r.status == FAIL and "change only onnx_file" in r.message, r.message
    assert checks.graph_loaded(stub, **kw).status == NOT_IMPLEMENTED
    assert checks.graph_loaded(stub, **kw, not_here="the CPU has no VNNI").status == NOT_RUN
    assert get_config(triton.http_url, CPU_ENCODER)["parameters"]["onnx_file"]["string_value"] == own


# --- PromQL against the Prometheus that watched the load ------------------------------------------------------

def answers_per_second(window):
    return f'sum by (status) (rate(servelab_requests_total{{endpoint="/embed"}}[{window}]))'


def test_promql_rates(assignments_monitoring):
    view = assignments_monitoring
    kw = dict(prometheus_url=view.prometheus_url, start=view.started, end=view.ended,
              counts=view.outcomes["servelab"], exercise="t")
    assert view.outcomes["servelab"].get("ok", 0) > 0, view.outcomes
    r = checks.promql_rates(answers_per_second, **kw)
    assert r.status == PASS, r.message
    seconds = int(r.detail["window_s"])
    r = checks.promql_rates(lambda w: answers_per_second(w)[:-1] + f") / {seconds}", **kw)  # rate ÷ window again
    assert r.status == FAIL and "already per second" in r.message, r.message
    r = checks.promql_rates(lambda w: f'sum by (status) (increase(servelab_requests_total{{endpoint="/embed"}}[{w}]))',
                            **kw)  # a count, not a rate
    assert r.status == FAIL and "divide increase()" in r.message, r.message
    r = checks.promql_rates(lambda w: f'sum by (status) (increase(servelab_requests_total{{endpoint="/embed"}}[{w}]))'
                            f" / {seconds}", **kw)  # the same rate, written as a count over the window's seconds
    assert r.status == PASS, r.message
    r = checks.promql_rates(lambda w: f'sum(rate(servelab_requests_total{{endpoint="/embed"}}[{w}]))', **kw)
    assert r.status == FAIL and "status" in r.message
    r = checks.promql_rates(lambda w: "sum by (status) (rate(servelab_requests_total[", **kw)
    assert r.status == FAIL and "refused" in r.message
    assert checks.promql_rates(stub, **kw).status == NOT_IMPLEMENTED
    r = checks.promql_rates(answers_per_second, **{**kw, "prometheus_url": None}, unavailable="no Prometheus: none")
    assert r.status == NOT_RUN and "no Prometheus" in r.message
