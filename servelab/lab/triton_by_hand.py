"""Triton called by hand, as lesson 04 shows it: one tritonclient request with binary or JSON tensors, a few
threads of batch-1 requests, and the model's statistics counters read before and after a load.

    client = httpclient.InferenceServerClient("127.0.0.1:8003")
    raw = raw_calls(client, "openclip_vit_b32_cpu", pixels)   # one row per encoding: bytes and round trip
    before = ModelCounts.read(http_url, model)
    send("127.0.0.1:8003", model, pixels, clients=8, per_client=3)
    ModelCounts.read(http_url, model).since(before)           # what that load made Triton do

These are the calls a student would type; servelab's load generator (servelab.bench.load) is the measured way.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import numpy as np
import pandas as pd
import tritonclient.http as httpclient

from servelab.errors import CannotRun
from servelab.model.contract import INPUT_NAME, OUTPUT_NAME


def infer_once(client: httpclient.InferenceServerClient, model: str, pixels: np.ndarray, binary: bool):
    """One request: the request body's size in bytes, the round trip in seconds, and the embedding."""
    inp = httpclient.InferInput(INPUT_NAME, list(pixels.shape), "FP32")
    inp.set_data_from_numpy(pixels, binary_data=binary)
    out = httpclient.InferRequestedOutput(OUTPUT_NAME, binary_data=binary)
    body, _ = httpclient.InferenceServerClient.generate_request_body([inp], [out])
    t0 = time.perf_counter()
    result = client.infer(model, inputs=[inp], outputs=[out])
    return len(body), time.perf_counter() - t0, result.as_numpy(OUTPUT_NAME)


def raw_calls(client: httpclient.InferenceServerClient, model: str, pixels: np.ndarray, repeats: int = 5) -> pd.DataFrame:
    """`repeats` calls with binary tensors, then as many with JSON: one row per encoding (request bytes, round trip
    median, min and max in ms). Both encodings must give the same embedding, else AssertionError."""
    raw = {name: [infer_once(client, model, pixels, binary) for _ in range(repeats)]
           for name, binary in (("binary", True), ("json", False))}
    if not np.allclose(raw["binary"][0][2], raw["json"][0][2], atol=1e-5):
        raise AssertionError("binary and JSON gave different embeddings")
    return pd.DataFrame([{"encoding": name, "request_bytes": calls[0][0],
                          "round_trip_ms_median": 1000 * float(np.median([c[1] for c in calls])),
                          "round_trip_ms_min": 1000 * min(c[1] for c in calls),
                          "round_trip_ms_max": 1000 * max(c[1] for c in calls)} for name, calls in raw.items()])


def send(address: str, model: str, pixels: np.ndarray, clients: int, per_client: int) -> None:
    """`clients` threads, each with its own client (tritonclient's HTTP client is not thread-safe), sending
    batch-1 requests back to back: the loop at the heart of any load generator, without its windows."""
    errors: list[BaseException] = []

    def worker():
        own = httpclient.InferenceServerClient(address)
        try:
            for _ in range(per_client):
                inp = httpclient.InferInput(INPUT_NAME, list(pixels.shape), "FP32")
                inp.set_data_from_numpy(pixels)
                own.infer(model, inputs=[inp])
        except Exception as exc:  # noqa: BLE001 - re-raised in the caller's thread below
            errors.append(exc)
        finally:
            own.close()

    threads = [threading.Thread(target=worker) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


@dataclass(frozen=True)
class ModelCounts:
    """A model's counters from Triton's statistics endpoint: images inferred, `execute` calls, and executions by
    batch size. Their ratio is the average executed batch."""

    inferences: int
    executions: int
    by_batch: dict[int, int] = field(default_factory=dict)

    @staticmethod
    def url(http_url: str, model: str) -> str:
        return f"{http_url}/v2/models/{model}/stats"

    @classmethod
    def read(cls, http_url: str, model: str) -> ModelCounts:
        """GET <http_url>/v2/models/<model>/stats, as the Chameleon lab reads it with curl."""
        s = httpx.get(cls.url(http_url, model), timeout=10).json()["model_stats"][0]
        batches = {b["batch_size"]: b["compute_infer"]["count"] for b in s.get("batch_stats", [])}
        return cls(int(s["inference_count"]), int(s["execution_count"]), batches)

    def since(self, before: ModelCounts) -> ModelCounts:
        """What happened between `before` and these counts (batch sizes that ran no execution left out)."""
        diff = {size: n - before.by_batch.get(size, 0) for size, n in sorted(self.by_batch.items())}
        return ModelCounts(self.inferences - before.inferences, self.executions - before.executions,
                           {size: n for size, n in diff.items() if n})

    @property
    def avg_batch(self) -> float:
        return self.inferences / max(self.executions, 1)


def traced(http_url: str, model: str, pixels: np.ndarray, clients: int, per_client: int) -> list:
    """`send`'s load with Triton's trace switched on for it (servelab.triton.trace.tracing): the traced requests,
    one RequestSpan each. RuntimeError when the trace file held none of them (a server on another machine
    writes its trace there, not here)."""
    from servelab.triton import trace

    with trace.tracing(http_url, model) as window:
        send(http_url.split("://")[-1], model, pixels, clients, per_client)
    spans = window.spans(expected=clients * per_client)
    if not spans:
        raise CannotRun("its trace file held no request of this window (a server on another machine writes it there)")
    return spans


def copy_model(repository: Path, model: str, name: str) -> Path:
    """`model`'s folder copied to `name` in the same repository, its config.pbtxt naming it `name` (its weights
    and model.py hard-linked, not copied; the config a file of its own, so that editing it leaves `model`'s alone)."""
    src, dst = Path(repository) / model, Path(repository) / name
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst, copy_function=os.link, ignore=shutil.ignore_patterns("config.pbtxt", "__pycache__"))
    text = (src / "config.pbtxt").read_text()
    (dst / "config.pbtxt").write_text(text.replace(f'name: "{model}"', f'name: "{name}"'))
    return dst


def on_off_table(rows: list[dict]) -> pd.DataFrame:
    """perf_analyzer's rows (batching "on" / "off", by concurrency) as one row per concurrency: img/s and p50 of
    each side and the ratio on ÷ off."""
    frame = pd.DataFrame(rows)
    table = frame.pivot(index="concurrency", columns="batching", values="throughput_img_s")[["on", "off"]]
    table["on ÷ off"] = table["on"] / table["off"]
    p50 = frame.pivot(index="concurrency", columns="batching", values="latency_p50_ms")[["on", "off"]]
    return table.join(p50.add_suffix(" p50 ms"))


def on_off_answer(rows: list[dict], ours: dict) -> str:
    """The sentence under `on_off_table(rows)`: on ÷ off at the lowest and the highest concurrency, beside
    servelab's own figure for the encoder at that concurrency (`ours`, a record), and whether a fixed count
    stood in for windows that never settled."""
    table, counted = on_off_table(rows), [r["counted"] for r in rows if r.get("counted")]
    first, top = table.iloc[0], table.iloc[-1]
    return (f"perf_analyzer: batching on ÷ off went from {first['on ÷ off']:.2f} at concurrency {table.index[0]} to "
            f"{top['on ÷ off']:.2f} at {table.index[-1]} ({top['on']:.1f} against {top['off']:.1f} img/s); servelab's "
            f"sweep measured the encoder at {ours['throughput_img_s']:.1f} img/s at concurrency {ours['concurrency']}, "
            "minutes apart. One run per line, not alternating windows: read a ratio near 1 as no difference."
            + (f" Its windows never settled here, so these are its first three windows of {counted[0]} requests, "
               "taken as they came, not stable measurements." if counted else ""))


def trace_versus(on_row: dict, off_row: dict) -> str:
    """Two traced windows' rows (batching_tables.trace_row), batching on and off, compared in one sentence."""
    return (f"Without dynamic batching the {off_row['requests']} requests ran in {off_row['executions']} executions "
            f"({off_row['batch_sizes']}) against {on_row['executions']}; median queue wait {off_row['queue_ms_median']:.0f} "
            f"ms against {on_row['queue_ms_median']:.0f} ms, execution {off_row['execution_ms_median']:.0f} against "
            f"{on_row['execution_ms_median']:.0f} ms, window {off_row['window_ms'] / on_row['window_ms']:.2f}× as long "
            "(one short window each: the alternating windows below measure the difference).")


def trace_alone(row: dict, histogram: dict, clients: int) -> str:
    """One traced window's row (batching_tables.trace_row) in a sentence, beside the sweep's /stats histogram."""
    return (f"{row['requests']} requests ran in {row['executions']} executions ({row['batch_sizes']}; /stats counted "
            f"{histogram} in the sweep). A request waited {row['queue_ms_median']:.0f} ms in the queue (median; at most "
            f"{row['queue_ms_max']:.0f} ms), an execution took {row['execution_ms_median']:.0f} ms. "
            + ("All arrived while the instance was free and ran as one batch." if row["executions"] == 1 else
               "A request arriving during an execution waits for its end, then rides in the next one with all who "
               "arrived meanwhile: groups taking turns"
               + (f", not one batch of {clients}." if row.get("largest_batch", 0) < clients else
                  f", though at least once all {clients} rode together.")))
