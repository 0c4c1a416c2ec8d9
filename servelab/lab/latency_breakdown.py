"""Where a Triton request's time went, from the client's mean latency and Triton's own statistics: queueing,
compute (input + infer + output), and what lies outside the server (HTTP, copies, the client). Lesson 06a.

    breakdown_table(step.frame(records, *BREAKDOWN_COLUMNS))   # one row per concurrency

The server's averages are taken over a slightly different span than the client's mean, so `outside_server_ms`
can come out a little below zero where almost nothing lies outside.
"""

from __future__ import annotations

import pandas as pd

COMPUTE = ("server_stats.avg_compute_input_ms", "server_stats.avg_compute_infer_ms", "server_stats.avg_compute_output_ms")
BREAKDOWN_COLUMNS = ("concurrency", "latency_mean_ms", "server_stats.avg_request_ms", "server_stats.avg_queue_ms", *COMPUTE)


def breakdown_table(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per concurrency: client_mean_ms, server_request_ms, server_queue_ms, server_compute_ms and
    outside_server_ms (client mean − the server's whole request time), rounded to 0.01 ms."""
    b = frame.copy()
    b["server_compute_ms"] = b[list(COMPUTE)].sum(axis=1)
    b["outside_server_ms"] = b["latency_mean_ms"] - b["server_stats.avg_request_ms"]
    b = b.rename(columns={"latency_mean_ms": "client_mean_ms", "server_stats.avg_request_ms": "server_request_ms",
                          "server_stats.avg_queue_ms": "server_queue_ms"})
    return b[["concurrency", "client_mean_ms", "server_request_ms", "server_queue_ms", "server_compute_ms",
              "outside_server_ms"]].round(2)
