"""Calls the student makes by hand before a harness makes them: one HTTP request to the running service, one
ONNX Runtime session. Each check runs the student's code on this machine and reports what happened.

    hand_request(embed_by_hand, url=lab.service_url, photo=photos[0], embed_images=local.embed_images, exercise="01.3")
    ort_session(make_session, path=model_path, providers=ort_providers("cuda"), exercise="03.3")
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np

from servelab.assignments.result import CheckResult, reject, run_check


def _cosine(a, b) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-12))


def hand_request(answer, *, url: str, photo: bytes, embed_images, exercise: str, step=None,
                 strict: bool | None = None) -> CheckResult:
    """answer: fn(http, photo) -> the photo's 512-d embedding, from one `POST /embed/tensor` the student sends
    with `http` (an httpx.Client whose base_url is the service at `url`). Correct: the service answered 200 and
    the embedding's cosine with this process's engine (`embed_images([photo])`) is at least 0.999. The result
    reports the status code and time of the student's requests, as the client saw them."""
    import httpx

    expected = np.asarray(embed_images([photo]), dtype=np.float64)[0]
    seen: list[httpx.Response] = []

    def record(response: httpx.Response) -> None:
        response.read()  # so `elapsed` is the whole answer's
        seen.append(response)

    http = httpx.Client(base_url=url, timeout=60.0, event_hooks={"response": [record]})

    def judge(value):
        posts = [r for r in seen if r.request.method == "POST" and r.request.url.path == "/embed/tensor"]
        if not posts:
            reject("no POST /embed/tensor reached the service: send the request with `http.post(\"/embed/tensor\", …)`")
        last = posts[-1]
        if last.status_code != 200:
            reject(f"the service answered {last.status_code}: {last.text[:200]} (the body is the float32 tensor's "
                   "bytes; X-Shape and X-Dtype say what they are)")
        vec = np.asarray(value if value is not None else [], dtype=np.float64).reshape(-1)
        if vec.shape != expected.shape:
            reject(f"return the photo's embedding, {expected.shape[0]} numbers; got {vec.size}")
        cos = _cosine(vec, expected)
        if cos < 0.999:
            reject(f"the embedding is not this photo's (cosine {cos:.3f} with the in-process engine's): preprocess "
                   "the photo you were given and send its tensor as it is")
        ms = last.elapsed.total_seconds() * 1000
        return (f"POST /embed/tensor → {last.status_code} in {ms:.0f} ms ({len(last.request.content):,} bytes "
                f"sent, {len(posts)} request{'s' if len(posts) != 1 else ''}); cosine {cos:.6f} with the in-process "
                "engine's embedding of the same photo")

    with http:
        return run_check("hand_request", exercise, answer, (http, photo), judge, step, strict)


def _name(p) -> str:
    return p[0] if isinstance(p, (tuple, list)) else p


def ort_session(answer, *, path, providers, exercise: str, step=None, strict: bool | None = None) -> CheckResult:
    """answer: fn(path, providers) -> an onnxruntime.InferenceSession for the model at `path`, asking for
    `providers` in order. Checked by running it here: the session is for `path`, runs one image to a 512-d
    embedding, and `get_providers()` is the asked-for providers this build has, in order — with ONNX Runtime's
    warning for each asked-for provider it lacks (the fallback, seen), which shows the list was passed."""
    import onnxruntime as ort

    asked = [_name(p) for p in providers]
    available = ort.get_available_providers()
    expected = [p for p in asked if p in available]
    missing = [p for p in asked if p not in available]
    said: list[str] = []

    def made(*args):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                return answer(*args) if callable(answer) else answer
            finally:
                said.extend(str(w.message) for w in caught)

    def judge(session):
        if not isinstance(session, ort.InferenceSession):
            reject(f"return the onnxruntime.InferenceSession itself, got {type(session).__name__}")
        if Path(getattr(session, "_model_path", "") or "") != Path(path):
            reject("the session is not for the model at `path`: pass `path` to InferenceSession")
        got = session.get_providers()
        unheard = [p for p in missing if not any(p in w for w in said)]
        if got != expected or unheard:
            reject(f"get_providers() is {got}; a session asked for `providers` in order would run on the ones this "
                   "build has, in that order, and ONNX Runtime would warn about each it lacks: pass "
                   "`providers=providers`")
        x = np.zeros((1, *session.get_inputs()[0].shape[1:]), dtype=np.float32)
        out = session.run(None, {session.get_inputs()[0].name: x})[0]
        if out.shape != (1, 512):
            reject(f"the session's output has shape {out.shape}, not (1, 512): is `path` the exported encoder?")
        so = session.get_session_options()
        fell = (f"fell back: ONNX Runtime warned ({'; '.join(w for w in said if any(p in w for p in missing))}) and "
                f"runs it on {got[0]}, without an error" if missing else f"nothing fell back: it runs on {got[0]}")
        return (f"asked for {asked}; get_providers(): {got} — {fell}. Options, read from the session: "
                f"intra_op_num_threads {so.intra_op_num_threads} (0: ONNX Runtime's default), graph optimisation "
                f"{so.graph_optimization_level.name}")

    return run_check("ort_session", exercise, made, (path, providers), judge, step, strict)
