"""Running a student's answer for real: a config stanza loaded into the running Triton, a python-backend
`execute` staged as a model and loaded next to the encoder, a FastAPI route served by uvicorn on loopback.

Each is a context manager that puts everything back on exit (the model's own config reloaded, the exercise
model unloaded and its folder removed, the server stopped), so a wrong answer never leaves the lab's stack
changed for the cells after it.
"""

from __future__ import annotations

import contextlib
import inspect
import shutil
import textwrap
import threading
import time
from dataclasses import replace
from pathlib import Path

from servelab.errors import InvalidValue, ServelabError


class NotApplied(ServelabError):
    """The answer could not be put into service; the message says why (Triton's or uvicorn's reason)."""


# --- a config stanza, live ---------------------------------------------------------------------------------

def merged_config(current: dict, fragment) -> dict:
    """The server's config (JSON dict) with the fragment's dynamic_batching / instance_group / max_batch_size
    replacing its own; the result as Triton's load API takes it. Leaving dynamic_batching out of the fragment
    keeps the model's; write `dynamic_batching { }` to keep batching with default settings."""
    from google.protobuf import json_format

    from servelab.triton.control import _normalise

    cfg = _normalise(current)
    if fragment.HasField("dynamic_batching"):
        cfg.dynamic_batching.CopyFrom(fragment.dynamic_batching)
    if len(fragment.instance_group):
        del cfg.instance_group[:]
        cfg.instance_group.extend(fragment.instance_group)
    if fragment.max_batch_size:
        cfg.max_batch_size = fragment.max_batch_size
    for key, value in fragment.parameters.items():  # a parameter in the fragment replaces the model's by key
        cfg.parameters[key].CopyFrom(value)
    return json_format.MessageToDict(cfg, preserving_proto_field_name=True)


@contextlib.contextmanager
def config_applied(http_url: str, model: str, fragment, timeout: float = 180.0):
    """Load `model` with the fragment merged into its current config (repository API, load with config);
    yields the config Triton then reports; reloads the original config on exit, whatever happened."""
    from servelab.triton.control import get_config, load_model

    original = get_config(http_url, model)
    try:
        load_model(http_url, model, merged_config(original, fragment), timeout=timeout)
    except RuntimeError as exc:
        _restore(http_url, model, original, timeout)
        raise NotApplied(str(exc)) from None
    try:
        yield get_config(http_url, model)
    finally:
        _restore(http_url, model, original, timeout)


def _restore(http_url: str, model: str, original: dict, timeout: float) -> None:
    from servelab.triton.control import config_dict, load_model

    load_model(http_url, model, config_dict(original), timeout=timeout)


def measure_triton(run, experiment: str, http_url: str, model: str, *, concurrency: int, opts, params: dict) -> dict:
    """One closed-loop point of batch-1 tensor requests against `model` as it is loaded now; the record written."""
    from servelab.bench.experiments.point import measure
    from servelab.bench.servers.lifecycle import attach

    srv = attach("triton-http", http_url, payload="tensor", model=model)
    return measure(run, experiment, srv, payload="tensor", batch=1, concurrency=concurrency, opts=opts, params=params)


# --- a python-backend model, live ----------------------------------------------------------------------------

MODEL_PY = '''\
"""Written by a servelab exercise check: the student's `execute` inside a python-backend model."""
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        pass

{execute}
'''


def function_source(fn) -> str:
    """The source of a function defined in a notebook cell (IPython keeps cell sources for inspect)."""
    try:
        return textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError) as exc:
        raise NotApplied(f"cannot read the source of {getattr(fn, '__name__', fn)!r} ({exc}): define it in a cell") from None


def model_py(execute_fn) -> str:
    """model.py text: the student's `execute(self, requests)` as the method of TritonPythonModel."""
    src = function_source(execute_fn)
    if not src.lstrip().startswith("def execute("):
        src = src.replace(f"def {execute_fn.__name__}(", "def execute(", 1)
    return MODEL_PY.format(execute=textwrap.indent(src, "    "))


@contextlib.contextmanager
def python_model(repository: str | Path, http_url: str, name: str, config_text: str, model_source: str,
                 timeout: float = 120.0):
    """Stage <repository>/<name> (config.pbtxt + 1/model.py), load it, yield; unload and remove on exit."""
    from servelab.triton.control import load_model, unload_model

    folder = Path(repository) / name
    if folder.exists():
        shutil.rmtree(folder)
    (folder / "1").mkdir(parents=True)
    (folder / "config.pbtxt").write_text(config_text)
    (folder / "1" / "model.py").write_text(model_source)
    try:
        try:
            load_model(http_url, name, timeout=timeout)
        except RuntimeError as exc:
            raise NotApplied(str(exc)) from None
        yield name
    finally:
        with contextlib.suppress(Exception):
            unload_model(http_url, name)
        shutil.rmtree(folder, ignore_errors=True)


# --- a FastAPI app, live ---------------------------------------------------------------------------------

@contextlib.contextmanager
def served_app(app, startup_timeout: float = 30.0):
    """Serve `app` with uvicorn on a free loopback port in a thread; yields its base URL; stops it on exit."""
    import uvicorn

    from servelab.netutil import free_port

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, name="exercise-uvicorn", daemon=True)
    thread.start()
    deadline = time.monotonic() + startup_timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            raise NotApplied("uvicorn did not start the app")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


# --- trials for the open-ended exercise -------------------------------------------------------------------------

class Trials:
    """Measure one configuration of the running Triton model per call, as records in `run` (experiment
    `experiment`, params.trial = 1, 2, …, params.settings = what was asked). The model's own config is back
    in place after each call. `baseline()` measures the model as it is with one client (params.trial =
    "baseline"), the reference the open-ended check compares with."""

    # The check ranks trials by their window bands; a window of one request (a smoke run's) is one sample, so its
    # band says nothing about the spread. Every window of a trial holds at least this many requests.
    MIN_WINDOW_REQUESTS = 4

    def __init__(self, run, triton_http_url: str, model: str, opts, experiment: str, *, kind: str = "KIND_CPU",
                 max_concurrency: int = 64, max_instances: int = 4, max_trials: int | None = None):
        opts = replace(opts, min_requests=max(opts.min_requests, self.MIN_WINDOW_REQUESTS))
        self.run, self.url, self.model, self.opts, self.experiment = run, triton_http_url, model, opts, experiment
        self.kind, self.max_concurrency, self.max_instances = kind, max_concurrency, max_instances
        self.max_trials = max_trials  # None: no limit; else a trial past it is refused (the assignment's budget)
        self.count = 0
        self._baseline = None

    def _measure(self, concurrency: int, params: dict) -> dict:
        return measure_triton(self.run, self.experiment, self.url, self.model, concurrency=concurrency,
                              opts=self.opts, params=params)

    def baseline(self) -> dict:
        if self._baseline is None:
            self._baseline = self._measure(1, {"trial": "baseline", "settings": {"concurrency": 1}})
        return self._baseline

    @staticmethod
    def is_baseline(settings: dict | None) -> bool:
        """Whether a trial's settings are the baseline's configuration: one client, nothing else changed."""
        settings = settings or {}
        return settings.get("concurrency") == 1 and all(v is None for k, v in settings.items() if k != "concurrency")

    def baseline_after(self) -> dict:
        """The baseline measured again once the trials are done: with `baseline()` it brackets them, so a
        machine that got busier (or quieter) meanwhile moves both ends of the comparison."""
        return self._measure(1, {"trial": "baseline-after", "settings": {"concurrency": 1}})

    def __call__(self, *, concurrency: int, max_queue_delay_us: int | None = None, instances: int | None = None,
                 preferred_batch_size: list[int] | None = None, threads: int | None = None,
                 spinning: bool | None = None) -> dict:
        """One trial: `concurrency` batch-1 clients against the model with these settings (None: as it is;
        `threads` and `spinning` set the CPU model's intra_op_threads and intra_op_spinning parameters).
        Returns {trial, settings, throughput_img_s, latency_p99_ms, errors} — the full record is in the run."""
        from tritonclient.grpc import model_config_pb2

        if self.max_trials is not None and self.count >= self.max_trials:
            raise InvalidValue(f"the budget is {self.max_trials} trials and you have measured {self.count}: "
                               "choose among them")
        if threads is not None and not 1 <= int(threads) <= 64:
            raise InvalidValue(f"threads must be 1..64, got {threads}")
        if not 1 <= int(concurrency) <= self.max_concurrency:
            raise InvalidValue(f"concurrency must be 1..{self.max_concurrency}, got {concurrency}")
        if instances is not None and not 1 <= int(instances) <= self.max_instances:
            raise InvalidValue(f"instances must be 1..{self.max_instances} on this machine, got {instances}")
        settings = {"concurrency": int(concurrency), "max_queue_delay_us": max_queue_delay_us, "instances": instances,
                    "preferred_batch_size": list(preferred_batch_size) if preferred_batch_size else None}
        if threads is not None or spinning is not None:  # only when asked: older records keep their layout
            settings.update(threads=threads, spinning=spinning)
        frag = model_config_pb2.ModelConfig()
        if max_queue_delay_us is not None or preferred_batch_size:
            from servelab.triton.control import _normalise, get_config

            current = _normalise(get_config(self.url, self.model))
            frag.dynamic_batching.CopyFrom(current.dynamic_batching)
            if max_queue_delay_us is not None:
                frag.dynamic_batching.max_queue_delay_microseconds = int(max_queue_delay_us)
            if preferred_batch_size:
                del frag.dynamic_batching.preferred_batch_size[:]
                frag.dynamic_batching.preferred_batch_size.extend(int(b) for b in preferred_batch_size)
        if instances is not None:
            frag.instance_group.add(kind=model_config_pb2.ModelInstanceGroup.Kind.Value(self.kind), count=int(instances))
        if threads is not None:
            frag.parameters["intra_op_threads"].string_value = str(int(threads))
        if spinning is not None:
            frag.parameters["intra_op_spinning"].string_value = "1" if spinning else "0"
        self.count += 1
        params = {"trial": self.count, "settings": settings}
        if frag.ByteSize():
            with config_applied(self.url, self.model, frag):
                rec = self._measure(int(concurrency), params)
        else:
            rec = self._measure(int(concurrency), params)
        return {"trial": self.count, "settings": settings, "throughput_img_s": rec.get("throughput_img_s"),
                "latency_p99_ms": rec.get("latency_p99_ms"), "errors": rec.get("errors")}
