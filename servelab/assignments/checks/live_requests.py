"""Checks that send a student's request to a running server and read back what the server then does: a JPEG
sent by hand to Triton's ensemble, a configuration loaded with the repository API, a PromQL query put to the
Prometheus that scraped the monitored service.

    triton_jpeg_call(embed_jpeg, triton_http_url=url, model=lab.triton_jpeg_model, photo=jpeg,
                     embed_images=service.embed_images, exercise="06a.4")
    loaded_config(load_mine, triton_http_url=url, model=lab.triton_model, config_text=my_text, exercise="06b.4")
    graph_loaded(deploy_graph, triton_http_url=url, model=lab.triton_model, onnx_path=int8_path, exercise="05a.4")
    promql_rates(answers_per_second, prometheus_url=view.prometheus_url, start=view.started, end=view.ended,
                 counts=view.outcomes["servelab"], exercise="06c.1")

Each passes for what this run's servers answer: the expected embedding, configuration or rate comes from the
same servers the student's request went to, or from the run's own records.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from servelab.assignments.checks.live_code import judge_embeddings
from servelab.assignments.result import CheckResult, NotRunHere, reject, run_check


def _server_error(answer):
    """The student's function, with a Triton refusal returned as a value (the check turns it into a hint)
    instead of an `error` result."""
    from tritonclient.utils import InferenceServerException

    def call(*args):
        try:
            return answer(*args)
        except InferenceServerException as exc:
            return exc

    return call


def _refused(value) -> str | None:
    from tritonclient.utils import InferenceServerException

    return str(value).splitlines()[0][:300] if isinstance(value, InferenceServerException) else None


def _reject_refused_load(value, otherwise: str) -> None:
    """Fail an answer whose load request Triton refused: a missing key is named as such, any other refusal gets
    `otherwise` (what the request should have sent)."""
    refused = _refused(value)
    if refused:
        key = any(w in refused.lower() for w in ("key", "header", "forbidden", "unauthori", "denied"))
        reject(f"Triton refused the load ({refused})"
               + (": every repository request carries the server's key (headers=lab.triton_headers)" if key else
                  f": {otherwise}"))


def triton_jpeg_call(answer, *, triton_http_url: str, model: str, photo: bytes, embed_images, exercise: str,
                     step=None, strict: bool | None = None) -> CheckResult:
    """answer: fn(url, model, jpeg) -> embedding, written by hand with `tritonclient.http`: an
    InferenceServerClient for `url` (host:port), an InferInput `IMAGE` of shape [1, 1] and type BYTES whose data
    is the file's bytes (a numpy object array), infer on the JPEG ensemble `model`, as_numpy("embedding").

    Checked by running it against the running Triton with `photo`: the result must be a float32 array of shape
    (1, 512) whose cosine with `embed_images([photo])` (the service's or the in-process embedding of the same
    file) is at least 0.999."""
    from servelab.triton.control import address

    expected = np.asarray(embed_images([photo]), dtype=np.float32)

    def judge(value):
        refused = _refused(value)
        if refused:
            hint = ("IMAGE is [batch, 1]: one JPEG is shape [1, 1]" if "shape" in refused.lower() else
                    "send the file's bytes as a BYTES tensor named IMAGE to the JPEG ensemble")
            reject(f"Triton refused the request ({refused}): {hint}")
        cos = judge_embeddings(value, expected, what="one JPEG was sent ({n} row)",
                               differs="send the file's bytes exactly as read (not decoded, not re-encoded) to "
                                       "the JPEG ensemble")
        return (f"Triton's ensemble {model} embedded the JPEG you sent by hand: cosine {cos.min():.6f} with the "
                f"same photo's embedding from servelab")

    return run_check("triton_jpeg_call", exercise, _server_error(answer), (address(triton_http_url), model, photo),
                     judge, step, strict)


def _threads_and_instances(config: dict) -> tuple[int, str | None]:
    """(instances, intra_op_threads) of a ModelConfig as JSON: the instance_group counts summed, and the
    python-backend model's `intra_op_threads` parameter (None where it has none)."""
    instances = sum(int(g.get("count", 1)) for g in config.get("instance_group") or [{}])
    threads = ((config.get("parameters") or {}).get("intra_op_threads") or {}).get("string_value")
    return instances, threads


def loaded_config(answer, *, triton_http_url: str, model: str, config_text: str | None, exercise: str,
                  unavailable: str = "", step=None, strict: bool | None = None) -> CheckResult:
    """answer: fn(client, model, config_text) that loads `model` into the running Triton with the configuration
    `config_text` (config.pbtxt text): one repository-API request, `client.load_model(model, config=<the
    config as JSON>, headers=<the server's key>)` (servelab.lab.config_text.as_json converts the text).

    Checked by reading the running server's configuration afterwards (GET /v2/models/<model>/config): it must
    serve the instances (the instance_group counts) and the intra_op_threads that `config_text` asks for, and
    the load must have changed something the server served before. Not run where `config_text` is None
    (`unavailable` says why). The loaded configuration stays: the notebook's next cells put the file's back."""
    import tritonclient.http as httpclient

    from servelab.lab.config_text import as_json
    from servelab.triton.control import address

    if config_text is None:
        return run_check("loaded_config", exercise, lambda *a: None, (), _not_here(unavailable or "no configuration "
                         "to load here"), step, strict)
    want = _threads_and_instances(json.loads(as_json(config_text)))
    client = httpclient.InferenceServerClient(address(triton_http_url), network_timeout=300, connection_timeout=300)
    before = _threads_and_instances(client.get_model_config(model))

    def judge(value):
        _reject_refused_load(value, "send the whole config.pbtxt, converted to JSON, as `config`")
        served = client.get_model_config(model)
        got = _threads_and_instances(served)
        detail = {"instances": got[0], "intra_op_threads": got[1]}
        if got == want:
            return (f"Triton now serves {model} with {got[0]} instance(s) × {got[1]} intra-op thread(s), the "
                    "configuration you loaded", detail)
        if got == before:
            reject(f"Triton still serves {before[0]} instance(s) × {before[1]} thread(s), as before your request: "
                   "a load without `config` reloads the repository's file; send your text as JSON in `config`",
                   detail)
        reject(f"Triton serves {got[0]} instance(s) × {got[1]} thread(s), not what your configuration asks for: "
               "load the edited text (`config_text`), not another one", detail)

    try:
        return run_check("loaded_config", exercise, _server_error(answer), (client, model, config_text), judge,
                         step, strict)
    finally:
        client.close()


def graph_loaded(answer, *, triton_http_url: str, model: str, onnx_path, exercise: str, not_here: str = "",
                 step=None, strict: bool | None = None) -> CheckResult:
    """answer: fn(client, model, onnx_path) that deploys the ONNX graph at `onnx_path` to the running `model`:
    read its config (`client.get_model_config(model)`), set its `onnx_file` parameter to the path
    (`{"string_value": str(onnx_path)}`), and load it with that config and the server's key
    (`client.load_model(model, config=json.dumps(config), headers=…)`).

    Checked by reading the running server's configuration afterwards: `model` must be READY with its `onnx_file`
    naming `onnx_path` and otherwise the config it had. The model's own config is loaded again afterwards,
    whatever the answer did, so that the notebook's comparison starts from it. Not run where `not_here` says why."""
    import tritonclient.http as httpclient

    from servelab.triton.control import address, config_dict, load_model, model_states

    if not_here:
        return run_check("graph_loaded", exercise, lambda *a: None, (), _not_here(not_here), step, strict)
    want = str(Path(onnx_path).resolve())
    client = httpclient.InferenceServerClient(address(triton_http_url), network_timeout=300, connection_timeout=300)
    own = config_dict(client.get_model_config(model))

    def onnx_file(config: dict) -> str | None:
        return ((config.get("parameters") or {}).get("onnx_file") or {}).get("string_value")

    def judge(value):
        _reject_refused_load(value, "send the model's whole config, as JSON, with only its onnx_file parameter changed")
        state = str(model_states(triton_http_url).get(model, "not in the repository index"))
        if not state.startswith("READY"):
            reject(f"{model} is not ready after your load ({state}): the path must be the int8 graph's file")
        served = config_dict(client.get_model_config(model))
        got = onnx_file(served)
        if got == onnx_file(own):
            reject(f"Triton still runs {got}, as before your request: a load without `config` reloads the "
                   "repository's file; send the config with onnx_file changed")
        if got is None or Path(got).resolve() != Path(want):
            reject(f"Triton runs {got}, not {want}: set onnx_file to the graph's path")
        rest = {k: v for k, v in served.items() if k != "parameters"}
        if rest != {k: v for k, v in own.items() if k != "parameters"}:
            reject("Triton serves your graph with other settings than the model's own: change only onnx_file")
        return f"Triton runs {model} on {Path(want).name} (onnx_file), its other settings as they were; its own config is back"

    try:
        return run_check("graph_loaded", exercise, _server_error(answer), (client, model, onnx_path), judge, step,
                         strict)
    finally:
        try:  # the notebook's comparison starts from the model's own config
            ready = str(model_states(triton_http_url).get(model, "")).startswith("READY")
            if not ready or config_dict(client.get_model_config(model)) != own:
                load_model(triton_http_url, model, own)
        finally:
            client.close()


def _not_here(why: str):
    def judge(_):
        raise NotRunHere(why)

    return judge


STATUSES = {"ok": "200", "shed": "503"}  # the load generator's outcomes, as the service's `status` label says them


def promql_rates(answer, *, prometheus_url: str | None, start: float, end: float, counts: dict, exercise: str,
                 unavailable: str = "", step=None, strict: bool | None = None) -> CheckResult:
    """answer: fn(window) -> a PromQL expression (a string) for the monitored service's answers per second on
    its embedding route, one series per `status` label, averaged over the last `window` (a PromQL duration,
    e.g. "16s"): `sum by (status) (rate(servelab_requests_total{endpoint="/embed"}[<window>]))`, or
    increase() divided by the window's seconds.

    Checked by evaluating it on the running Prometheus (GET /api/v1/query) at the end of the stepped load
    (`start`, `end`: unix seconds), `window` covering the whole load and a scrape either side, and comparing
    each status's value with the same rate Prometheus computes for the reference expression at that moment
    (within 5 %: rate() extrapolates to the window's edges, so a scrape that lands late under load moves both
    alike), and the run's own records (`counts`: the load generator's outcomes, "ok" and "shed", over the load,
    divided by the window's seconds) beside it. Not run where no Prometheus ran (`unavailable` says why)."""
    import httpx

    if not prometheus_url:
        return run_check("promql_rates", exercise, lambda *a: None, (), _not_here(
            unavailable or "no Prometheus scraped the monitored service here"), step, strict)
    window_s = int(math.ceil(end - start)) + 2  # the load and a scrape either side of it
    window = f"{window_s}s"
    at = start + window_s - 1.0  # the end of the load and a scrape past it
    recorded = {STATUSES[k]: n / window_s for k, n in counts.items() if k in STATUSES and n}
    if not recorded:
        return run_check("promql_rates", exercise, lambda *a: None, (), _not_here(
            "the load generator recorded no answer from the service during the load"), step, strict)

    def query(promql):
        try:
            r = httpx.get(f"{prometheus_url.rstrip('/')}/api/v1/query", params={"query": promql, "time": at},
                          timeout=10.0)
            return r, r.json()
        except (httpx.HTTPError, ValueError) as exc:
            raise NotRunHere(f"Prometheus at {prometheus_url} did not answer ({exc})") from None

    def judge(promql):
        if not isinstance(promql, str) or not promql.strip():
            reject(f"return the PromQL expression as a string (got {type(promql).__name__})")
        _, ref = query(f'sum by (status) (rate(servelab_requests_total{{endpoint="/embed"}}[{window}]))')
        reference = {s["metric"].get("status"): float(s["value"][1])
                     for s in (ref.get("data") or {}).get("result", [])}
        # the statuses the load generator saw, at the rate Prometheus itself puts on them (its records where it has none)
        expected = {status: reference.get(status, per_s) for status, per_s in recorded.items()}
        r, body = query(promql)
        if body.get("status") != "success":
            reject(f"Prometheus refused the expression: {body.get('error', r.text)[:300]}")
        data = body["data"]
        if data.get("resultType") != "vector":
            reject(f"the expression gives a {data.get('resultType')}, not an instant vector: rate() or increase() "
                   "over a range turns the range into one value per series")
        series = data["result"]
        if not series:
            reject("the expression has no value at the end of the load: check the metric's name "
                   "(servelab_requests_total) and the `endpoint` label (the route is /embed)")
        by_status: dict[str, float] = {}
        for s in series:
            status = s["metric"].get("status")
            if status is None:
                reject("the result has no `status` label: keep one series per status (sum by (status))")
            by_status[status] = by_status.get(status, 0.0) + float(s["value"][1])
        if len(by_status) < len(series):
            reject("several series share a status: sum them by (status), so that each status is one value")
        detail = {"promql": promql, "window_s": window_s, "got": by_status, "prometheus_per_s": expected,
                  "records_per_s": recorded}
        for status, want in expected.items():
            got = by_status.get(status)
            if got is None:
                reject(f"the service answered status {status} during the load, and your expression has no series "
                       "for it: do not filter it out", detail)
            if abs(got - want) > 0.05 * want + 1e-9:
                ratio = got / want if want else float("inf")
                if abs(ratio - window_s) < 0.2 * window_s:
                    hint = "it is a count over the window: divide increase() by the window's seconds, or use rate()"
                elif abs(ratio * window_s - 1) < 0.2:
                    hint = "rate() is already per second: do not divide it by the window again"
                else:
                    hint = ("read the rate over the whole window you are given, of the service's counter "
                            "(servelab_requests_total) on its embedding route only")
                reject(f"status {status}: your expression gives {got:.2f}/s where the service's counter rose at "
                       f"{want:.2f}/s over the window: {hint}", detail)
        extra = sorted(set(by_status) - set(expected) - {s for s, v in by_status.items() if v == 0})
        if extra:
            reject(f"your expression has answers with status {', '.join(extra)} that the load generator did not "
                   "record during the load: read the embedding route (endpoint=\"/embed\") only", detail)
        said = ", ".join(f"{s}: {by_status[s]:.2f}/s (the load generator: {recorded[s]:.2f}/s)" for s in sorted(expected))
        return f"Prometheus evaluated your PromQL over the last {window}: {said}", detail

    return run_check("promql_rates", exercise, answer, (window,), judge, step, strict)
