"""A request's client latency split into Triton's queue and compute and the time outside the server."""

from __future__ import annotations

import pandas as pd
import pytest

from servelab.lab.latency_breakdown import BREAKDOWN_COLUMNS, breakdown_table


def test_compute_sums_input_infer_output_and_the_rest_is_outside_the_server():
    frame = pd.DataFrame([[1, 30.0, 25.0, 1.0, 2.0, 20.0, 0.5], [8, 200.0, 201.0, 170.0, 2.0, 25.0, 0.5]],
                         columns=list(BREAKDOWN_COLUMNS))
    out = breakdown_table(frame)
    assert list(out.columns) == ["concurrency", "client_mean_ms", "server_request_ms", "server_queue_ms",
                                 "server_compute_ms", "outside_server_ms"]
    assert out["server_compute_ms"].tolist() == pytest.approx([22.5, 27.5])
    assert out["outside_server_ms"].tolist() == pytest.approx([5.0, -1.0]), "the server's span can exceed the client's"
    assert out["server_queue_ms"].tolist() == [1.0, 170.0]
