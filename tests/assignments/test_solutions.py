"""Every exercise of the real notebooks, without running the notebooks: the instructor's exercise cell and its
check cell execute against synthetic stand-ins for the variables the notebook would have measured (shaped
like this lab's records), and — for the exercises applied live — against a real tritonserver and the real
engine. The solution must PASS; the student version must fail cleanly (`not implemented`)."""

from __future__ import annotations

import ast
import hashlib
import json
import linecache
import math

import jupytext
import numpy as np
import pandas as pd
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from servelab.assignments import checks
from servelab.assignments.exercises import find, student_source
from servelab.assignments.live import Trials
from servelab.assignments.result import NOT_IMPLEMENTED, PASS, STRICT_ENV, CheckResult
from servelab.bench.experiments import emulated_lesson
from servelab.bench.load import LoadOpts
from servelab.client import InferenceClient
from servelab.deploy.capacity import pod_shape
from servelab.lab.config_text import as_json, edited
from servelab.lab.notebooks import discover
from servelab.lab.session import session
from servelab.lab.step import Step, repo_path
from servelab.model.device_profile import DeviceProfile
from servelab.triton.models import CPU_ENCODER, EMULATED_ENCODER, ENSEMBLE

# variables each exercise's cells use, as the notebook's measuring cells would leave them; a function of the
# live context (a real tritonserver, this test's Step, photos) for the exercises that run the answer for real
_NAN = float("nan")


def _rec(*, windows, **fields) -> dict:
    """A load record as the bench writes it: mean throughput and its per-window throughputs."""
    return {"kind": "load", "throughput_img_s": sum(windows) / len(windows), "window_throughput_img_s": windows,
            "requests": 10, "errors": 0, **fields}


def _opts():
    return LoadOpts.smoke(max_windows=2, max_warmup_s=1.0) if hasattr(LoadOpts, "smoke") else LoadOpts.quick(progress=False)


class Live:
    """Fixtures the live exercises need, requested only when an exercise's bindings ask for them."""

    def __init__(self, request, step):
        self._request, self.step = request, step

    @property
    def triton(self):
        return self._request.getfixturevalue("assignments_triton")

    @property
    def emulated_triton_url(self):
        """The live Triton's URL, with its emulated-accelerator model loaded (staged beside the encoder)."""
        from servelab.triton.control import load_model, model_states

        url = self.triton.http_url
        if model_states(url).get(EMULATED_ENCODER) != "READY":
            load_model(url, EMULATED_ENCODER)
        return url

    def lab(self, notebook: str, **harness):
        """Where the notebook runs, as the lab runner hands it over: the real session() on a harness dict."""
        return session(notebook, {"harness": {"place": "local", "out_dir": str(self.step.out_dir), **harness}})

    def staged_config(self, model: str) -> str:
        """The live Triton's config.pbtxt text for `model`, loaded again when the test ends (an answer may load
        another)."""
        import json

        from servelab.triton.control import load_model

        url, text = self.triton.http_url, (self.triton.repository / model / "config.pbtxt").read_text()
        self._request.addfinalizer(lambda: load_model(url, model, json.loads(as_json(text))))
        return text

    @property
    def jpeg_triton(self):
        """The live Triton with its JPEG ensemble loaded beside the encoder."""
        return self._request.getfixturevalue("assignments_jpeg_triton")

    @property
    def monitoring(self):
        """A monitoring view whose Prometheus is still up (it scraped a real service under a stepped load)."""
        return self._request.getfixturevalue("assignments_monitoring")

    @property
    def service(self):
        """A real uvicorn service (tests/conftest.py), as the lab's `lab.service_url`."""
        from types import SimpleNamespace

        return SimpleNamespace(service_url=self._request.getfixturevalue("service").url)

    def sweep_of_batch_1_requests(self):
        """04.3's sweep: a few batch-1 requests from two clients to the live Triton's encoder."""
        from servelab.lab.triton_by_hand import send

        send(self.triton.http_address, CPU_ENCODER, np.zeros((1, 3, 224, 224), np.float32), clients=2, per_client=2)

    def copy_of_encoder(self, live: bool, edited: bool = False, loaded: bool = False) -> dict:
        """04.4-04.6: the student's copy of the encoder as the lesson's copy cell leaves it (`edited`: without its
        dynamic_batching stanza, as 04.4 leaves it; `loaded`: loaded, as 04.5 leaves it): in the live Triton's
        repository, or (`live` False) in a repository of this test's own. Unloaded and removed after the test."""
        import shutil

        from servelab.lab.triton_by_hand import copy_model
        from servelab.triton.control import load_model, model_states, unload_model
        from servelab.triton.repository import STAGING

        mine = f"{CPU_ENCODER}_mine"
        if live:
            repository, url = self.triton.repository, self.triton.http_url
        else:
            repository, url = self.step.out_dir / "models", "http://127.0.0.1:9"
            (repository / CPU_ENCODER).mkdir(parents=True, exist_ok=True)
            shutil.copy(STAGING / "cpu" / CPU_ENCODER / "config.pbtxt", repository / CPU_ENCODER / "config.pbtxt")
        path = copy_model(repository, CPU_ENCODER, mine) / "config.pbtxt"
        if edited:
            text = path.read_text()
            start = text.index("\ndynamic_batching") + 1
            path.write_text(text[:start] + text[text.index("\n}", start) + 3:])
        if loaded:
            load_model(url, mine)

        def cleanup():
            if live and model_states(url).get(mine, "").startswith("READY"):
                unload_model(url, mine)
            shutil.rmtree(path.parent, ignore_errors=True)

        self._request.addfinalizer(cleanup)
        return {"repository": repository, "mine": mine, "mine_dir": path.parent, "not_here": None,
                "lab": self.lab("04", triton_http_url=url, triton_model=CPU_ENCODER)}

    @property
    def perf_analyzer(self):
        from servelab.triton import perf_analyzer as pa

        if pa.find() is None:
            pytest.skip("no perf_analyzer here: `servelab triton get-perf-analyzer` fetches it")
        return pa.find()

    @property
    def onnx_meta(self):
        """The exported graphs (fp32 and int8) the lab serves: servelab.model.export.ensure_exported."""
        return self._request.getfixturevalue("onnx_meta")

    @property
    def photos(self):
        self._request.getfixturevalue("onnx_meta")
        return self._request.getfixturevalue("photos")
BINDINGS: dict[str, dict] = {
    "03.1": {"batch_sizes": [1, 4], "table": pd.DataFrame({
        "engine": ["torch", "onnx", "onnx-int8", "torch", "onnx", "onnx-int8", "onnx"],
        "provider": ["cpu"] * 6 + ["cuda"], "available": [True] * 6 + [False], "batch": [1, 1, 1, 4, 4, 4, 4],
        "throughput_img_s": [18.0, 23.0, 54.0, 26.0, 31.0, 70.0, _NAN]})},
    "03.2": {},
    "03.3": {},
    "04.1": {"concurrency_levels": [1, 4], "hi_c": 4, "prediction_04": "triton-http",
             "service_conc": [_rec(server="fastapi", concurrency=c, windows=w) for c, w in ((1, [19, 21]), (4, [22, 25]))],
             "triton_conc": [_rec(server="triton-http", concurrency=c, windows=w) for c, w in ((1, [18, 20]), (4, [24, 27]))]},
    "04.2": lambda ctx: {"max_batch": 32, "instance_kind": "KIND_CPU", "concurrency_levels": [1, 2], "opts": _opts(),
                         "lab": ctx.lab("04", triton_http_url=ctx.triton.http_url, triton_model=CPU_ENCODER)},
    "04.3": lambda ctx: {"lab": ctx.lab("04", triton_http_url=ctx.triton.http_url, triton_model=CPU_ENCODER),
                         "triton_sweep": ctx.sweep_of_batch_1_requests},
    "04.4": lambda ctx: ctx.copy_of_encoder(live=False),
    "04.5": lambda ctx: {**ctx.copy_of_encoder(live=True, edited=True), "httpclient": httpclient},
    "04.6": lambda ctx: {**ctx.copy_of_encoder(live=True, edited=True, loaded=True), "pa_binary": ctx.perf_analyzer,
                         "pa_range": (1, 2, 1), "pa_requests": 2, "loaded_mine": CheckResult("04.5", PASS, "")},
    "05a.1": {"hi_c": 4, "latency_budget_ms": 1.25 * 300.0, "cells": pd.DataFrame({
        "max_queue_delay_us": [0, 0, 2000, 2000, 10000, 10000], "concurrency": [1, 4, 1, 4, 1, 4],
        "throughput_img_s": [19.0, 24.0, 18.0, 28.0, 16.0, 31.0],
        "latency_p99_ms": [60.0, 300.0, 66.0, 340.0, 80.0, 420.0]})},
    "05a.2": {"serialisation_batches": [1, 4], "serialisation": pd.DataFrame([
        {"payload": p, "batch": b, "bytes_per_request": n * b}
        for b in (1, 4) for p, n in (("json-lists", 1_900_000), ("binary-tensor", 602_112), ("jpeg", 24_000),
                                     ("jpeg-reencode", 21_000), ("base64-json", 32_100),
                                     ("preprocess+binary", 602_112))])},
    # the emulated accelerator, loaded into the live Triton; a profile of the student's own (written to a file)
    "05a.3": lambda ctx: {"emulated": emulated_lesson, "lab": ctx.lab("05a", triton_http_url=ctx.emulated_triton_url),
                          "emu_ready": True,
                          "top_c": 4, "opts": LoadOpts.smoke(min_requests=4, min_p50s=2, max_windows=3),
                          "exercise_device": DeviceProfile(name="my-card", fixed_ms=2.0, per_image_ms=0.5, full_at=16,
                                                           time_scale=10.0, source="a student's guess")},
    # the int8 graph deployed to the live Triton's encoder (the check loads the encoder's own config again)
    "05a.4": lambda ctx: {"lab": ctx.lab("05a", triton_http_url=ctx.triton.http_url, triton_model=CPU_ENCODER),
                          "meta": ctx.onnx_meta, "why_not": "", "json": json},
    "05b.1": {"trt_max_batch": 64, "trt_cache": "/trt_cache"},
    "06a.1": {"concurrency_levels": [1, 4], "recs": [
        _rec(server=t, concurrency=c, windows=w) for t, c, w in (
            ("fastapi", 1, [18, 20]), ("fastapi", 4, [24, 26]), ("triton-http", 1, [17, 19]),
            ("triton-http", 4, [28, 30]), ("litserve", 1, [19, 21]), ("litserve", 4, [25, 27]))],
        # the alternating windows at the highest concurrency, as compare_servers writes them (a ÷ b)
        "head_to_head": [{"kind": "ab", "a": "fastapi", "b": "triton-http", "concurrency": 4, "ratio": 0.86,
                          "ratio_min": 0.83, "ratio_max": 0.89, "repeats": 3, "stable": True}], "peer": []},
    "06a.3": lambda ctx: {"lab": ctx.lab("06a", triton_http_url=ctx.triton.http_url,
                                          triton_repository=str(ctx.triton.repository))},
    "06a.4": lambda ctx: {"lab": ctx.lab("06a", triton_http_url=ctx.jpeg_triton.http_url, triton_model=CPU_ENCODER,
                                          triton_jpeg_model=ENSEMBLE)},
    "06b.4": lambda ctx: {"lab": ctx.lab("06b", triton_http_url=ctx.triton.http_url, triton_model=CPU_ENCODER),
                          "my_text": edited(ctx.staged_config(CPU_ENCODER), 'instance_group [ { kind: KIND_CPU, count: 2 } ]'),
                          "as_json": as_json, "not_here": ""},
    "06c.1": lambda ctx: {"view": ctx.monitoring},
    # windows of several requests: the check ranks trials by their bands, which one-request windows make too narrow
    "06b.3": lambda ctx: {"concurrency_levels": [1, 2], "trials": Trials(
        ctx.step.run, ctx.triton.http_url, CPU_ENCODER, LoadOpts.smoke(min_requests=4, min_p50s=3, max_windows=3),
        "t-06b-p99"), "budget_ms": 60_000},
    "06a.2": {"concurrency_levels": [1, 4], "breakdown": pd.DataFrame({
        "concurrency": [1, 4], "client_mean_ms": [60.0, 210.0], "server_request_ms": [48.0, 180.0],
        "outside_server_ms": [12.0, 30.0]})},
    "06b.1": {"concurrency_levels": [1, 4], "points": pd.DataFrame({
        "instances": [1, 1, 2, 2, 4, 4], "concurrency": [1, 4, 1, 4, 1, 4],
        "throughput_img_s": [18.0, 24.0, 18.5, 30.0, 18.0, 33.0]})},
    "06b.2": {},
    "07.1": lambda ctx: {"lab": ctx.lab("07", triton_http_url=ctx.triton.http_url, triton_grpc_url=ctx.triton.grpc_url,
                                        triton_model=CPU_ENCODER), "grpcclient": grpcclient},
    "07.2": {"concurrency_levels": [1, 4], "prediction_07": "tie", "recs": [
        {"protocol": p, "batch": 1, "concurrency": c, "latency_p99_ms": v, "spread": 0.1}
        for p, c, v in (("http", 1, 60.0), ("grpc", 1, 58.0), ("http", 4, 260.0), ("grpc", 4, 240.0))]},
    "07.3": {"pa_path": "build/perf_analyzer/perf_analyzer", "model": CPU_ENCODER, "http_address": "127.0.0.1:8003",
             "grpc_address": "127.0.0.1:8004", "clients": 4, "pa_requests": 48},
    "01.1": {"batch_sizes": [1, 4], "hop": pd.DataFrame({
        "server": ["in-process", "in-process", "fastapi", "fastapi"], "batch": [1, 4, 1, 4],
        "latency_p50_ms": [42.0, 150.0, 49.5, 171.0]})},
    "01.2": lambda ctx: {"photos": ctx.photos, "InferenceClient": InferenceClient},
    "01.3": lambda ctx: {"photos": ctx.photos, "InferenceClient": InferenceClient, "lab": ctx.service},
    "02.1": {"cold_start_s": 8.0},
    "08.1": {"cold_start_s": 8.0},
    "08.2": {"math": math, "service_points": pd.DataFrame({"throughput_img_s": [14.5, 9.0]}), "cores": 2.0,
             "deployed_engine": "onnx", "shape": pod_shape(repo_path("k8s", "base"))},  # 20 ÷ (7.25 × 0.6) → 5
    "09.1": {"evaluation": pd.DataFrame({"threshold": [0.80, 0.85, 0.90, 0.92, 0.95, 0.97, 0.99],
                                         "precision": [0.40, 0.62, 0.81, 0.93, 0.97, 1.00, 1.00],
                                         "recall": [1.00, 1.00, 0.98, 0.91, 0.80, 0.55, 0.30]})},
}


def _exercises(directory=None):
    out = []
    for py in discover(directory) if directory else discover():
        nb = jupytext.read(py)
        for e in find(nb, py.name):
            live = callable(BINDINGS.get(e.id))
            out.append(pytest.param(nb, e, id=e.id, marks=[pytest.mark.triton] if live else []))
    return out


def _run(cells: list[str], env: dict):
    """Exec the cells; the value of the last cell's final expression (the check's result) is returned."""
    value = None
    for src in cells:
        name = f"<cell {hashlib.sha1(src.encode()).hexdigest()[:12]}>"
        linecache.cache[name] = (len(src), None, src.splitlines(True), name)  # as IPython does: inspect finds it
        tree = ast.parse(src)
        last = tree.body[-1] if tree.body and isinstance(tree.body[-1], ast.Expr) else None
        if last is not None:
            tree.body = tree.body[:-1]
        exec(compile(tree, name, "exec"), env)
        value = eval(compile(ast.Expression(last.value), name, "eval"), env) if last is not None else None
    return value


EXERCISES = _exercises()


def test_the_notebooks_have_exercises():
    assert EXERCISES




# Exercises whose solution measures a live Triton for half a minute: the suite's smoke lab runs the instructor
# notebooks, these solutions included, against its own Triton, and
# tests/assignments/test_lab_notebooks.py::test_instructor_notebooks_passed_in_the_last_lab_run fails unless each
# passed there. Here only the student version runs (it fails before measuring anything).
SOLVED_IN_THE_SMOKE_LAB = {"04.2", "05a.3", "06b.3"}


@pytest.mark.parametrize("nb, exercise", EXERCISES)
def test_solution_passes_and_student_version_fails_cleanly(nb, exercise, monkeypatch, capsys, request, tmp_path):
    monkeypatch.delenv(STRICT_ENV, raising=False)
    assert exercise.id in BINDINGS, f"add synthetic bindings for exercise {exercise.id} ({exercise.check}) to BINDINGS"
    step = Step(exercise.notebook, tmp_path / "run")
    bindings = BINDINGS[exercise.id]
    bindings = bindings(Live(request, step)) if callable(bindings) else bindings
    base = {"checks": checks, "step": step, "pd": pd, "np": np, **bindings}
    ex_src, check_src = nb.cells[exercise.cell].source, nb.cells[exercise.check_cell].source

    if exercise.id not in SOLVED_IN_THE_SMOKE_LAB:
        result = _run([ex_src, check_src], dict(base))
        assert result is not None and result.status == PASS, (exercise.id, result and result.message)
        assert "PASS" in capsys.readouterr().out

    student = student_source(ex_src, exercise.stub())
    result = _run([student, check_src], dict(base))
    assert result.status == NOT_IMPLEMENTED, (exercise.id, result.message)
