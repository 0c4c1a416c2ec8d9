"""The rows lesson 04 draws from its measurements to explain dynamic batching: what a batch saved per image by
engine, one traced window summed up, and the same point measured by perf_analyzer and by servelab.

    batch_gain_by_engine({"PyTorch in-process": torch_batches, "ONNX Runtime in Triton": triton_batches}, 1, 8)
    batch_gain_cause(triton_batch_ratio, target=8, margin=step.margin(interleaved=True))   # what the batch bought
    trace_row(spans, "its own config")        # requests, executions, batch sizes, queue waits, window
    QueueWait(clients=8, avg_batch=3.7, queue_ms=212, compute_ms=315).sentence()   # the N/B − 1 rule, checked
    tools_side_by_side(pa_result, triton_conc[-1])
    switch_row("this CPU", triton_ratio, triton_on, predicted=1.4, predicted_from="the batch-size table")

Each takes the records or spans a lesson already has and returns plain rows; the lesson files them as tables.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from servelab.bench.report.grades import Grade, grade
from servelab.bench.report.verdicts import Why, ratio_reading
from servelab.triton import trace


def per_image_ms(records: list[dict], batch: int) -> tuple[float, float]:
    """(ms per image, images per second) of the point measured at `batch` with one client: both from its
    throughput, so a batch's saving per image and its gain in images per second are one figure read two ways
    (a p50 ÷ batch would disagree with the throughput wherever the latency's tail is long)."""
    row = next(r for r in records if r["batch"] == batch)
    return 1000.0 / row["throughput_img_s"], row["throughput_img_s"]


# what a batch of B bought one client, by the grade of batch B ÷ batch 1 against 1 and against B×
BATCH_GAIN_CAUSE = {
    Grade.FLAT: "The pairs do not tell a gain from none: a batch cost about its size in time.",
    Grade.LOSS: "A batch cost more than its size in time.",
    Grade.FAR_FROM_TARGET: "A batch saved part of what a single image left unused (per-call cost or idle units), "
                           "not most of it.",
    Grade.CLOSE_TO_TARGET: "Close to proportional: the hardware had parallelism batch 1 left idle.",
    Grade.ABOVE_TARGET: "More than proportional: one image at a time ran well below this hardware's rate.",
}


def batch_gain_grade(ratio: dict, *, target: float, margin: float) -> Grade:
    """batch B ÷ batch 1 measured in alternating windows (an `ab` record), graded on its whole pair range: flat
    when the pairs rank no direction (servelab.bench.report.ratio_reading) or any pair reaches within `margin` of
    1, else a loss, or close to, short of or past `target` (B×). Read from the pairs, never from two sweep points
    measured apart, whose margin is the machine's drift."""
    if not ratio_reading(ratio).ranked:
        return Grade.FLAT
    return grade(ratio["ratio"], ratio.get("ratio_min"), ratio.get("ratio_max"), margin=margin, target=target)


def batch_gain_cause(ratio: dict, *, target: float, margin: float) -> str:
    """The sentence saying what the batch bought, for the grade `batch_gain_grade` gives; none offered when the
    pairs are too few, show no spread, or keep to one side below the margin."""
    v = ratio_reading(ratio)
    if not v.ranked and v.why is not Why.BOTH_SIDES:
        return "The pairs cannot rank it, so this run does not say what a batch saved."
    return BATCH_GAIN_CAUSE[batch_gain_grade(ratio, target=target, margin=margin)]


@dataclass(frozen=True)
class QueueWait:
    """A closed-loop request's wait at `clients` clients, in executions: the rule against Triton's own means.
    A request rides with avg_batch − 1 others, so the clients − avg_batch ahead of it go avg_batch at a time:
    N/B − 1 executions (N − 1 without batching). Measured: Triton's mean queue wait ÷ its mean compute time."""

    clients: int
    avg_batch: float
    queue_ms: float
    compute_ms: float

    @classmethod
    def of(cls, rec: dict) -> QueueWait:
        """From a record measured with Triton's statistics (`server_stats`): its clients, executed batch, queue
        and compute means (NaN where the statistics could not be read)."""
        stats = rec.get("server_stats") or {}

        def mean(key):
            return float("nan") if stats.get(key) is None else float(stats[key])

        return cls(int(rec["concurrency"]), float(stats.get("avg_batch") or 1), mean("avg_queue_ms"),
                   mean("avg_compute_infer_ms"))

    @property
    def predicted(self) -> float:
        return max(0.0, self.clients / max(self.avg_batch, 1.0) - 1)

    @property
    def measured(self) -> float:
        return self.queue_ms / self.compute_ms if self.compute_ms else float("nan")

    @property
    def reading(self) -> str:
        """"close to" (within a factor of 4/3 either way), "less than" or "more than" the rule."""
        if self.predicted < 0.1:
            return "close to" if self.measured < 0.25 else "more than"
        r = self.measured / self.predicted
        return "close to" if 0.75 <= r <= 4 / 3 else "less than" if r < 1 else "more than"

    def sentence(self) -> str:
        n, b = self.clients, self.avg_batch
        if self.measured != self.measured:  # NaN: Triton's statistics were not read
            return (f"The rule N/B − 1 predicts a wait of {n}/{b:.2f} − 1 ≈ {self.predicted:.1f} executions; Triton's "
                    "statistics were not read, so this run does not check it")
        return (f"The rule N/B − 1 predicts a wait of {n}/{b:.2f} − 1 ≈ {self.predicted:.1f} executions; Triton's "
                f"queue held a request {self.queue_ms:.0f} ÷ {self.compute_ms:.0f} ms ≈ {self.measured:.2f} "
                f"executions, {self.reading} the rule"
                + (" (a request that arrives during an execution waits only for the rest of it)"
                   if self.reading == "less than" else ""))


def batch_gain_by_engine(by_engine: dict[str, list[dict]], lo_b: int, hi_b: int) -> pd.DataFrame:
    """One row per engine: ms per image at batch `lo_b` and `hi_b`, what the batch saved per image, the images per
    second at both, and their ratio (`batch_gain`). `by_engine`: engine label -> its batch-sweep records."""
    rows = []
    for label, records in by_engine.items():
        (t1, x1), (tb, xb) = per_image_ms(records, lo_b), per_image_ms(records, hi_b)
        rows.append({"engine": label, f"ms_per_image_batch_{lo_b}": t1, f"ms_per_image_batch_{hi_b}": tb,
                     "saved_ms_per_image": t1 - tb, f"img_s_batch_{lo_b}": x1, f"img_s_batch_{hi_b}": xb,
                     "batch_gain": xb / x1})
    return pd.DataFrame(rows)


def trace_row(spans: list[trace.RequestSpan], label: str) -> dict:
    """One traced window summed up: requests, executions and their batch sizes, queue wait (median, max),
    execution time (median) and the whole window, in ms."""
    runs = trace.executions(spans)
    hist = trace.batch_histogram(runs)
    queue = np.array([s.queue_ms for s in spans])
    compute = np.array([r.compute_end - r.compute_start for r in runs]) / 1e6
    return {"config": label, "requests": len(spans), "executions": len(runs),
            "batch_sizes": str(hist), "largest_batch": max(hist, default=0), "queue_ms_median": float(np.median(queue)),
            "queue_ms_max": float(queue.max()), "execution_ms_median": float(np.median(compute)),
            "window_ms": (max(s.request_end for s in spans) - min(s.queue_start for s in spans)) / 1e6}


def tools_side_by_side(pa_result, ours: dict) -> pd.DataFrame:
    """perf_analyzer's result (servelab.triton.perf_analyzer.PerfResult) beside servelab's record of the same
    point: throughput, latency and the server's queue and compute time."""
    stats_of = ours.get("server_stats") or {}
    return pd.DataFrame([
        {"tool": "perf_analyzer (NVIDIA, C++ client)", "concurrency": pa_result.concurrency,
         "throughput_img_s": pa_result.throughput_img_s, "latency_p50_ms": pa_result.latency_p50_ms,
         "latency_p99_ms": pa_result.latency_p99_ms, "server_queue_ms": pa_result.server_queue_ms,
         "server_compute_ms": pa_result.server_compute_ms},
        {"tool": "servelab closed loop (Python threads)", "concurrency": ours["concurrency"],
         "throughput_img_s": ours["throughput_img_s"], "latency_p50_ms": ours["latency_p50_ms"],
         "latency_p99_ms": ours["latency_p99_ms"], "server_queue_ms": stats_of.get("avg_queue_ms"),
         "server_compute_ms": stats_of.get("avg_compute_infer_ms")}])


def ratio_columns(r: dict, name: str = "ratio") -> dict:
    """An alternating-windows ratio record as table columns: the ratio (under `name`) and the range of its pairs."""
    return {name: r["ratio"], "pairs_min": r["ratio_min"], "pairs_max": r["ratio_max"]}


def switch_row(device: str, ratio: dict, on: dict, predicted: float, predicted_from: str) -> dict:
    """One device's dynamic-batching switch: its on ÷ off ratio record and pair range, the average batch the
    batching-on side executed (its server's counters), and the gain that was predicted for it, and from what."""
    return {"device": device, **ratio_columns(ratio, "on_div_off"),
            "avg_batch_on": (on.get("server_stats") or {}).get("avg_batch"),
            "predicted": round(predicted, 2), "predicted_from": predicted_from}
