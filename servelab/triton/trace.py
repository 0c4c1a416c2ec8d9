"""Triton's own request trace (mode triton, level TIMESTAMPS) read back as one span per request, grouped into
the executions that ran them: dynamic batching made visible.

    from servelab.triton.trace import tracing, executions, plot_timeline
    with tracing(http_url, model) as window:   # TIMESTAMPS at rate 1 through the trace API, OFF again on exit
        ...                                      # send 24 requests
    spans = window.spans(expected=24)            # list[RequestSpan] (waits until the 24 are in the file)
    runs = executions(spans)                     # list[Execution]: the requests one `execute` call ran together
    plot_timeline(spans, "timeline.png")         # one bar per request: waiting in the queue, then computing

Triton writes the trace file itself; where it goes is fixed when the server starts (`--trace-config
triton,file=<path>`: the trace API refuses to move it, "trace file location can not be updated through network
protocol"). EmbeddedTriton always starts with a trace file next to its log and tracing OFF, which costs
nothing; `tracing` turns it on and off at runtime (`update_trace_settings`, the same call as
`curl -X POST <url>/v2/models/<model>/trace/setting -d '{"trace_level": ["TIMESTAMPS"], "trace_rate": "1"}'`)
and reads the requests that reached the queue in between (Triton's timestamps are CLOCK_MONOTONIC, the clock
of time.monotonic_ns). `trace_file(http_url)` is None when the server was started without one.

The file is a JSON list of small objects, each carrying a trace `id` and either the model's name or one
timestamp (`{"id": 7, "timestamps": [{"name": "QUEUE_START", "ns": ...}]}`); it is appended to as requests
finish and closed with `]` only at shutdown, so it is read object by object. Triton holds back the trace of the
last request it traced until another traced request comes (seen with the bundled 2.51 and its python backend),
so `tracing` ends its window with one request of zeros that is left out of it. Requests that one `execute` call
ran share their COMPUTE_START and COMPUTE_END to the nanosecond (the backend reports one set of timestamps per
execution), which is how `executions` groups them.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from servelab.errors import CannotRun, InvalidValue
from servelab.triton.control import management_client


# the server flags EmbeddedTriton passes: a file, tracing off until the trace API turns it on
def server_args(path: Path | str) -> list[str]:
    return [f"--trace-config=triton,file={path}", "--trace-config=level=OFF", "--trace-config=rate=1"]


@dataclass(frozen=True)
class RequestSpan:
    """One traced request, in nanoseconds of Triton's clock. Queue wait = compute_start - queue_start."""
    trace_id: int
    model: str
    queue_start: int
    compute_start: int
    compute_end: int
    request_end: int

    @property
    def queue_ms(self) -> float:
        return (self.compute_start - self.queue_start) / 1e6

    @property
    def compute_ms(self) -> float:
        return (self.compute_end - self.compute_start) / 1e6


@dataclass(frozen=True)
class Execution:
    """The requests one model execution ran together (their shared compute start and end)."""
    compute_start: int
    compute_end: int
    trace_ids: tuple[int, ...]

    @property
    def size(self) -> int:
        return len(self.trace_ids)


def read_objects(text: str) -> list[dict]:
    """The JSON objects of a trace file's text, whether or not the list was closed (the server still runs)."""
    decoder = json.JSONDecoder()
    out, i, n = [], 0, len(text)
    while i < n:
        if text[i] in "[], \n\r\t":
            i += 1
            continue
        try:
            obj, i = decoder.raw_decode(text, i)
        except json.JSONDecodeError:
            break  # a trace being written at this instant: read the rest next time
        if isinstance(obj, dict):
            out.append(obj)
    return out


def spans_from(objects: list[dict], model: str | None = None) -> list[RequestSpan]:
    """One span per request that has all four timestamps (queue start, compute start/end, request end),
    optionally only `model`'s; in queue order."""
    stamps: dict[int, dict[str, int]] = defaultdict(dict)
    names: dict[int, str] = {}
    for obj in objects:
        tid = obj.get("id")
        if tid is None:
            continue
        if "model_name" in obj:
            names[tid] = obj["model_name"]
        for ts in obj.get("timestamps", []):
            stamps[tid][ts["name"]] = int(ts["ns"])
    need = ("QUEUE_START", "COMPUTE_START", "COMPUTE_END", "REQUEST_END")
    spans = [RequestSpan(tid, names.get(tid, ""), *(s[k] for k in need))
             for tid, s in stamps.items() if all(k in s for k in need)]
    if model is not None:
        spans = [s for s in spans if s.model == model]
    return sorted(spans, key=lambda s: (s.queue_start, s.trace_id))


def executions(spans: list[RequestSpan]) -> list[Execution]:
    """Requests grouped by their shared compute start and end: one Execution per `execute` call, in time order."""
    groups: dict[tuple[int, int], list[int]] = defaultdict(list)
    for s in spans:
        groups[(s.compute_start, s.compute_end)].append(s.trace_id)
    return [Execution(start, end, tuple(ids)) for (start, end), ids in sorted(groups.items())]


def batch_histogram(runs: list[Execution]) -> dict[int, int]:
    """{executed batch size: executions}, the same shape as Triton's /stats batch_stats."""
    hist: dict[int, int] = defaultdict(int)
    for r in runs:
        hist[r.size] += 1
    return dict(sorted(hist.items()))


def trace_file(http_url: str) -> Path | None:
    """Where the server writes its trace (its own answer to GET /v2/trace/setting), None if nowhere."""
    with management_client(http_url, "trace settings") as c:
        path = c.get_trace_settings().get("trace_file") or ""
    return Path(path) if path else None


class TraceWindow:
    """What `tracing` yields: the trace file and the window's start and end on Triton's clock (CLOCK_MONOTONIC,
    the same clock as Python's time.monotonic_ns on Linux)."""

    def __init__(self, path: Path, model: str | None):
        self.path, self.model = path, model
        self.opened_ns = time.monotonic_ns()
        self.closed_ns: int | None = None

    def spans(self, expected: int | None = None, timeout: float = 10.0) -> list[RequestSpan]:
        """The requests that reached Triton's queue while the window was open. Triton writes a request's trace
        a moment after its answer has gone out: given `expected`, wait (up to `timeout` s) until that many are
        in the file."""
        deadline = time.monotonic() + timeout
        while True:
            spans = self._read()
            if expected is None or len(spans) >= expected or time.monotonic() > deadline:
                return spans
            time.sleep(0.05)

    def _read(self) -> list[RequestSpan]:
        if not self.path.exists():
            return []
        text = self.path.read_text(encoding="utf-8", errors="replace")
        end = self.closed_ns if self.closed_ns is not None else time.monotonic_ns()
        return [s for s in spans_from(read_objects(text), self.model) if self.opened_ns <= s.queue_start <= end]


def _one_more_request(http_url: str, model: str) -> None:
    """One request of zeros (batch 1): Triton keeps the trace of the last request it traced until another one
    comes, so the window's last request reaches the file only after this one."""
    import numpy as np
    import tritonclient.http as th
    from tritonclient.utils import triton_to_np_dtype

    with management_client(http_url, f"a closing request to {model!r}", timeout=120.0) as c:
        meta = c.get_model_metadata(model)
        inputs = []
        for spec in meta["inputs"]:
            shape = [1 if d < 0 else d for d in spec["shape"]]
            inp = th.InferInput(spec["name"], shape, spec["datatype"])
            inp.set_data_from_numpy(np.zeros(shape, dtype=triton_to_np_dtype(spec["datatype"])))
            inputs.append(inp)
        c.infer(model, inputs)


@contextlib.contextmanager
def tracing(http_url: str, model: str, *, rate: int = 1):
    """Trace every `rate`-th request to `model` (TIMESTAMPS) inside the block; after it, one request of zeros
    pushes the last traced request into the file (it is not part of the window), and tracing is OFF again.
    RuntimeError when the server writes no trace file, or the file is not on this machine."""
    path = trace_file(http_url)
    if path is None:
        raise CannotRun("this Triton writes no trace file (start it with --trace-config triton,file=<path>)")
    if not path.parent.is_dir():
        raise CannotRun(f"this Triton's trace file {path} is not on this machine")
    window = TraceWindow(path, model)
    settings = {"trace_level": ["TIMESTAMPS"], "trace_rate": str(rate), "trace_count": "-1", "log_frequency": "0"}
    with management_client(http_url, "trace settings") as c:
        c.update_trace_settings(model_name=model, settings=settings)
    try:
        yield window
    finally:
        window.closed_ns = time.monotonic_ns()
        try:
            _one_more_request(http_url, model)
        finally:
            with management_client(http_url, "trace settings") as c:
                c.update_trace_settings(model_name=model, settings={"trace_level": ["OFF"]})


def plot_timeline(spans: list[RequestSpan], path: Path | str, *, title: str = "", max_requests: int = 60):
    """One horizontal bar per request (the first `max_requests`): grey while it waits in Triton's queue,
    coloured while its execution computes; requests of one execution share a colour and a bracket with the
    batch size. Time in ms from the first request's arrival. Returns the path written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = spans[:max_requests]
    if not shown:
        raise InvalidValue("no traced requests to draw")
    runs = executions(shown)
    colour_of = {tid: i for i, r in enumerate(runs) for tid in r.trace_ids}
    t0 = min(s.queue_start for s in shown)
    ms = lambda ns: (ns - t0) / 1e6  # noqa: E731
    cmap = plt.get_cmap("tab10")
    fig, ax = plt.subplots(figsize=(9, 0.18 * len(shown) + 1.6))
    for row, s in enumerate(shown):
        ax.barh(row, ms(s.compute_start) - ms(s.queue_start), left=ms(s.queue_start), color="0.82", height=0.8)
        ax.barh(row, ms(s.compute_end) - ms(s.compute_start), left=ms(s.compute_start),
                color=cmap(colour_of[s.trace_id] % 10), height=0.8)
    rows = {s.trace_id: row for row, s in enumerate(shown)}
    for r in runs:
        ys = [rows[t] for t in r.trace_ids]
        ax.text(ms(r.compute_end) + 2, (min(ys) + max(ys)) / 2, f"batch {r.size}", va="center", fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("ms since the first request reached Triton's queue")
    ax.set_ylabel("request (arrival order)")
    ax.set_title((title + "\n" if title else "Triton trace\n") + "grey: waiting in the queue · colour: the execution "
                 "that ran it", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)
