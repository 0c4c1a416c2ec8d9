"""Server-side numbers from Triton: per-model statistics and Prometheus metrics, as before/after deltas.

    from servelab.triton.server_stats import read_stats, read_metrics, stats_delta, ModelStats
    from servelab.triton.models import CPU_ENCODER

    s = read_stats(http_url, CPU_ENCODER)                 # ModelStats (cumulative since load)
    with stats_delta(http_url, CPU_ENCODER, metrics_url=None) as d:
        ...                                                  # run the experiment
        d.expected_requests = n                              # optional: wait until Triton has counted n requests
    d.result                 # ModelStats: after - before
    d.result.summary()       # {"requests", "failures", "inferences", "executions", "avg_batch",
                             #  "batch_hist" {size: executions}, "avg_request_ms", "avg_queue_ms",
                             #  "avg_compute_input_ms", "avg_compute_infer_ms", "avg_compute_output_ms"}
    d.metrics                # {metric name: delta} from /metrics for this model (when metrics_url given)
    d.metrics_summary        # same keys as summary() where the metrics carry them (None without metrics_url)
    read_metrics(metrics_url)            -> {model: {metric name: value}} summed over versions (nv_inference_*)
    read_metrics(metrics_url, "m")       -> {metric name: value}

`http_url` is "http://127.0.0.1:8003" or "127.0.0.1:8003" (EmbeddedTriton.http_url). Sources: Triton's
statistics extension through tritonclient (get_inference_statistics) and GET <metrics_url> parsed with
prometheus_client.parser. Definitions: requests = successful requests; inferences = images (batch rows);
executions = model executions (batches the dynamic batcher formed); avg_batch = inferences / executions;
batch_hist from batch_stats (executed batch size -> executions); the avg_*_ms are per request (Triton's
cumulative ns / count). Queue time is time a request waited in the scheduler before its batch ran.
For an ensemble the model-level figures are the ensemble's; read the composing models for batch sizes.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field

from servelab.triton.control import management_client

SECTIONS = ("success", "fail", "queue", "compute_input", "compute_infer", "compute_output")
METRIC_PREFIX = "nv_inference_"


@dataclass
class ModelStats:
    model: str
    inferences: int = 0
    executions: int = 0
    sections: dict = field(default_factory=lambda: {s: (0, 0) for s in SECTIONS})  # name -> (count, ns)
    batch_hist: dict = field(default_factory=dict)  # executed batch size -> executions

    @classmethod
    def from_json(cls, model: str, payload: dict) -> ModelStats:
        """Sum the entries of a /v2/models/<m>/stats answer (one per loaded version)."""
        out = cls(model)
        for entry in payload.get("model_stats", []):
            out.inferences += int(entry.get("inference_count", 0))
            out.executions += int(entry.get("execution_count", 0))
            inf = entry.get("inference_stats", {})
            for s in SECTIONS:
                c, n = out.sections[s]
                d = inf.get(s, {})
                out.sections[s] = (c + int(d.get("count", 0)), n + int(d.get("ns", 0)))
            for b in entry.get("batch_stats", []) or []:
                size = int(b["batch_size"])
                execs = int(b.get("compute_infer", {}).get("count", 0))
                out.batch_hist[size] = out.batch_hist.get(size, 0) + execs
        return out

    def __sub__(self, other: ModelStats) -> ModelStats:
        hist = {k: self.batch_hist.get(k, 0) - other.batch_hist.get(k, 0)
                for k in set(self.batch_hist) | set(other.batch_hist)}
        return ModelStats(
            self.model,
            self.inferences - other.inferences,
            self.executions - other.executions,
            {s: (self.sections[s][0] - other.sections[s][0], self.sections[s][1] - other.sections[s][1]) for s in SECTIONS},
            {k: v for k, v in sorted(hist.items()) if v},
        )

    @property
    def requests(self) -> int:
        return self.sections["success"][0]

    @property
    def failures(self) -> int:
        return self.sections["fail"][0]

    @property
    def avg_batch(self) -> float | None:
        return self.inferences / self.executions if self.executions else None

    def avg_ms(self, section: str) -> float | None:
        c, ns = self.sections[section]
        return ns / c / 1e6 if c else None

    def summary(self) -> dict:
        return {
            "model": self.model,
            "requests": self.requests,
            "failures": self.failures,
            "inferences": self.inferences,
            "executions": self.executions,
            "avg_batch": self.avg_batch,
            "batch_hist": dict(sorted(self.batch_hist.items())),
            "avg_request_ms": self.avg_ms("success"),
            "avg_queue_ms": self.avg_ms("queue"),
            "avg_compute_input_ms": self.avg_ms("compute_input"),
            "avg_compute_infer_ms": self.avg_ms("compute_infer"),
            "avg_compute_output_ms": self.avg_ms("compute_output"),
        }


def read_stats(http_url: str, model: str, version: str = "", timeout: float = 10.0) -> ModelStats:
    with management_client(http_url, f"stats for {model!r}", timeout) as c:
        return ModelStats.from_json(model, c.get_inference_statistics(model, model_version=version))


def parse_metrics(text: str) -> dict[str, dict[str, float]]:
    """Prometheus text -> {model: {sample name: value}} for nv_inference_* samples, summed over versions."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if not sample.name.startswith(METRIC_PREFIX) or "model" not in sample.labels:
                continue
            # the parser names counter samples "<name>_total"; keep Triton's own metric names
            name = family.name if sample.name in (family.name, family.name + "_total") else sample.name
            if "le" in sample.labels or "quantile" in sample.labels:  # histogram buckets / summary quantiles
                continue
            per = out.setdefault(sample.labels["model"], {})
            per[name] = per.get(name, 0.0) + float(sample.value)
    return out


def read_metrics(metrics_url: str, model: str | None = None, timeout: float = 10.0):
    import httpx

    url = metrics_url.rstrip("/")
    if "://" not in url:
        url = f"http://{url}"
    if not url.endswith("/metrics"):
        url += "/metrics"
    r = httpx.get(url, timeout=timeout)
    r.raise_for_status()
    parsed = parse_metrics(r.text)
    return parsed.get(model, {}) if model is not None else parsed


def metrics_summary(m: dict[str, float]) -> dict:
    """Derived figures from (delta) nv_inference_* metrics of one model; same keys as ModelStats.summary()."""
    req = m.get("nv_inference_request_success", 0.0)
    inf = m.get("nv_inference_count", 0.0)
    ex = m.get("nv_inference_exec_count", 0.0)

    def per_req(name):
        return m[name] / req / 1e3 if req and name in m else None

    return {
        "requests": int(req),
        "failures": int(m.get("nv_inference_request_failure", 0.0)),
        "inferences": int(inf),
        "executions": int(ex),
        "avg_batch": inf / ex if ex else None,
        "avg_request_ms": per_req("nv_inference_request_duration_us"),
        "avg_queue_ms": per_req("nv_inference_queue_duration_us"),
        "avg_compute_input_ms": per_req("nv_inference_compute_input_duration_us"),
        "avg_compute_infer_ms": per_req("nv_inference_compute_infer_duration_us"),
        "avg_compute_output_ms": per_req("nv_inference_compute_output_duration_us"),
    }


@dataclass
class StatsDelta:
    http_url: str
    model: str
    metrics_url: str | None = None
    before: ModelStats | None = None
    result: ModelStats | None = None
    metrics_before: dict | None = None
    metrics: dict | None = None
    expected_requests: int | None = None  # set inside the block when known: the exit waits for Triton to count them

    @property
    def metrics_summary(self) -> dict | None:
        return metrics_summary(self.metrics) if self.metrics is not None else None

    def summary(self) -> dict:
        return self.result.summary() if self.result else {}


@contextmanager
def stats_delta(http_url: str, model: str, metrics_url: str | None = None, *, expected_requests: int | None = None,
                wait_s: float = 5.0):
    """`with stats_delta(url, model) as d: ...` then d.result (ModelStats after - before), d.metrics.

    Triton counts a request in its statistics and metrics just after it has sent the answer, so a client can hold
    every answer before the last batch is counted. At the start, the counts are read until two reads 100 ms apart
    agree (for at most `wait_s`): a request answered just before the block is counted before it, not in it. Given
    `expected_requests` (or `d.expected_requests` set inside the block), the exit re-reads until that many
    successful requests are counted, for at most `wait_s`."""
    d = StatsDelta(http_url, model, metrics_url, expected_requests=expected_requests)
    d.before = _settled(lambda: read_stats(http_url, model), time.monotonic() + wait_s)
    if metrics_url:
        d.metrics_before = read_metrics(metrics_url, model)
    yield d
    deadline = time.monotonic() + wait_s
    d.result = _read_until(lambda: read_stats(http_url, model) - d.before, lambda r: r.requests,
                           d.expected_requests, deadline)
    if metrics_url:
        d.metrics = _read_until(lambda: _metrics_delta(read_metrics(metrics_url, model), d.metrics_before),
                                lambda m: m.get("nv_inference_request_success", 0.0), d.expected_requests, deadline)


def _metrics_delta(after: dict, before: dict) -> dict:
    return {k: after.get(k, 0.0) - before.get(k, 0.0) for k in set(after) | set(before)}


def _settled(read, deadline: float):
    """read() every 100 ms until two reads agree or the deadline passes; the last read."""
    value = read()
    while time.monotonic() < deadline:
        time.sleep(0.1)
        again = read()
        if again == value:
            return again
        value = again
    return value


def _read_until(read, counted, expected: int | None, deadline: float):
    """read() again every 50 ms until counted(it) reaches `expected` (no wait without one) or the deadline passes."""
    while True:
        value = read()
        if not expected or counted(value) >= expected or time.monotonic() > deadline:
            return value
        time.sleep(0.05)
