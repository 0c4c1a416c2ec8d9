"""Every exercise of the real notebooks, without running the notebooks: the instructor's exercise cell and its
check cell execute against synthetic stand-ins for the variables the notebook would have measured (shaped
like this lab's tables). The solution must PASS; the student version must fail cleanly (`not implemented`)."""

from __future__ import annotations

import ast

import jupytext
import numpy as np
import pandas as pd
import pytest

from servelab.assignments import checks
from servelab.assignments.exercises import find, student_source
from servelab.assignments.result import NOT_IMPLEMENTED, PASS, STRICT_ENV
from servelab.lab.notebooks import discover

# variables each exercise's cells use, as the notebook's measuring cells would leave them
_NAN = float("nan")
BINDINGS: dict[str, dict] = {
    "03.1": {"batch_sizes": [1, 4], "table": pd.DataFrame({
        "engine": ["torch", "onnx", "onnx-int8", "torch", "onnx", "onnx-int8", "onnx"],
        "provider": ["cpu"] * 6 + ["cuda"], "available": [True] * 6 + [False], "batch": [1, 1, 1, 4, 4, 4, 4],
        "throughput_img_s": [18.0, 23.0, 54.0, 26.0, 31.0, 70.0, _NAN]})},
    "03.2": {},
    "04.1": {"concurrency_levels": [1, 4], "by_conc": pd.DataFrame({
        "target": ["fastapi", "fastapi", "triton-http", "triton-http"], "concurrency": [1, 4, 1, 4],
        "throughput_img_s": [20.0, 24.0, 19.0, 28.0], "latency_p50_ms": [50.0, 160.0, 52.0, 140.0]})},
    "04.2": {"max_batch": 16, "instance_kind": "KIND_CPU"},
    "05a.1": {"hi_c": 4, "latency_budget_ms": 1.25 * 300.0, "cells": pd.DataFrame({
        "max_queue_delay_us": [0, 0, 2000, 2000, 10000, 10000], "concurrency": [1, 4, 1, 4, 1, 4],
        "throughput_img_s": [19.0, 24.0, 18.0, 28.0, 16.0, 31.0],
        "latency_p99_ms": [60.0, 300.0, 66.0, 340.0, 80.0, 420.0]})},
    "05a.2": {"serialisation_batches": [1, 4], "serialisation": pd.DataFrame([
        {"payload": p, "batch": b, "bytes_per_request": n * b}
        for b in (1, 4) for p, n in (("json-lists", 1_900_000), ("binary-tensor", 602_112), ("jpeg", 24_000),
                                     ("jpeg-reencode", 21_000), ("base64-json", 32_100),
                                     ("preprocess+binary", 602_112))])},
    "05b.1": {"trt_max_batch": 64, "trt_cache": "/trt_cache"},
    "06a.1": {"concurrency_levels": [1, 4], "three_way": pd.DataFrame({
        "target": ["fastapi", "fastapi", "triton-http", "triton-http", "litserve", "litserve"],
        "concurrency": [1, 4, 1, 4, 1, 4], "throughput_img_s": [19.0, 25.0, 18.0, 29.0, 20.0, 26.0]})},
    "06a.2": {"concurrency_levels": [1, 4], "breakdown": pd.DataFrame({
        "concurrency": [1, 4], "client_mean_ms": [60.0, 210.0], "server_request_ms": [48.0, 180.0],
        "outside_server_ms": [12.0, 30.0]})},
    "06b.1": {"concurrency_levels": [1, 4], "points": pd.DataFrame({
        "instances": [1, 1, 2, 2, 4, 4], "concurrency": [1, 4, 1, 4, 1, 4],
        "throughput_img_s": [18.0, 24.0, 18.5, 30.0, 18.0, 33.0]})},
    "06b.2": {},
    "07.1": {"batch_sizes": [1, 8], "by_batch": pd.DataFrame({
        "protocol": ["http", "grpc", "http", "grpc"], "batch": [1, 1, 8, 8], "concurrency": [1, 1, 1, 1],
        "throughput_img_s": [18.0, 19.0, 26.0, 27.5]})},
    "07.2": {"concurrency_levels": [1, 4], "by_conc": pd.DataFrame({
        "protocol": ["http", "grpc", "http", "grpc"], "batch": [1, 1, 1, 1], "concurrency": [1, 1, 4, 4],
        "latency_p99_ms": [60.0, 58.0, 260.0, 240.0]})},
    "01.1": {"batch_sizes": [1, 4], "hop": pd.DataFrame({
        "target": ["in-process", "in-process", "fastapi", "fastapi"], "batch": [1, 4, 1, 4],
        "latency_p50_ms": [42.0, 150.0, 49.5, 171.0]})},
    "02.1": {"cold_start_s": 8.0},
    "08.1": {"cold_start_s": 8.0},
    "09.1": {"evaluation": pd.DataFrame({"threshold": [0.80, 0.85, 0.90, 0.92, 0.95, 0.97, 0.99],
                                         "precision": [0.40, 0.62, 0.81, 0.93, 0.97, 1.00, 1.00],
                                         "recall": [1.00, 1.00, 0.98, 0.91, 0.80, 0.55, 0.30]})},
}


def _exercises(directory=None):
    out = []
    for py in discover(directory) if directory else discover():
        nb = jupytext.read(py)
        for e in find(nb, py.name):
            out.append(pytest.param(nb, e, id=e.id))
    return out


def _run(cells: list[str], env: dict):
    """Exec the cells; the value of the last cell's final expression (the check's result) is returned."""
    value = None
    for src in cells:
        tree = ast.parse(src)
        last = tree.body[-1] if tree.body and isinstance(tree.body[-1], ast.Expr) else None
        if last is not None:
            tree.body = tree.body[:-1]
        exec(compile(tree, "<cell>", "exec"), env)
        value = eval(compile(ast.Expression(last.value), "<cell>", "eval"), env) if last is not None else None
    return value


EXERCISES = _exercises()


@pytest.mark.skipif(not EXERCISES, reason="no exercises in the notebooks yet")
@pytest.mark.parametrize("nb, exercise", EXERCISES or [pytest.param(None, None, id="none")])
def test_solution_passes_and_student_version_fails_cleanly(nb, exercise, monkeypatch, capsys):
    monkeypatch.delenv(STRICT_ENV, raising=False)
    assert exercise.id in BINDINGS, f"add synthetic bindings for exercise {exercise.id} ({exercise.check}) to BINDINGS"
    base = {"checks": checks, "step": None, "pd": pd, "np": np, **BINDINGS[exercise.id]}
    ex_src, check_src = nb.cells[exercise.cell].source, nb.cells[exercise.check_cell].source

    result = _run([ex_src, check_src], dict(base))
    assert result is not None and result.status == PASS, (exercise.id, result and result.message)
    assert "PASS" in capsys.readouterr().out

    student = student_source(ex_src, exercise.stub())
    result = _run([student, check_src], dict(base))
    assert result.status == NOT_IMPLEMENTED, (exercise.id, result.message)
