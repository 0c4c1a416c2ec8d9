"""Lesson 04's calls by hand against a real tritonserver: binary and JSON requests give one embedding and the
JSON body is several times larger; N threads of batch-1 requests show up in Triton's counters and in its trace."""

from __future__ import annotations

import numpy as np
import pytest
import tritonclient.http as th

from servelab.lab import triton_by_hand as by_hand

pytestmark = pytest.mark.triton

ENCODER = "openclip_vit_b32_cpu"
PIXELS = np.random.default_rng(0).random((1, 3, 224, 224), dtype=np.float32)


def test_json_body_is_larger_than_binary_and_both_give_one_embedding(triton):
    client = th.InferenceServerClient(triton.http_address)
    rows = by_hand.raw_calls(client, ENCODER, PIXELS, repeats=2).set_index("encoding")
    assert rows.loc["json", "request_bytes"] > 3 * rows.loc["binary", "request_bytes"]
    assert (rows["round_trip_ms_min"] <= rows["round_trip_ms_median"]).all()
    assert (rows["round_trip_ms_median"] <= rows["round_trip_ms_max"]).all()


def test_counters_since_before_count_the_requests_sent(triton):
    before = by_hand.ModelCounts.read(triton.http_url, ENCODER)
    by_hand.send(triton.http_address, ENCODER, PIXELS, clients=3, per_client=2)
    sent = by_hand.ModelCounts.read(triton.http_url, ENCODER).since(before)
    assert sent.inferences == 6
    assert 1 <= sent.executions <= 6
    assert sum(size * n for size, n in sent.by_batch.items()) == 6


def test_traced_returns_one_span_per_request(triton):
    spans = by_hand.traced(triton.http_url, ENCODER, PIXELS, clients=2, per_client=2)
    assert len(spans) == 4 and all(s.model == ENCODER for s in spans)


def test_send_raises_what_a_thread_met(triton):
    with pytest.raises(Exception, match="no_such_model"):
        by_hand.send(triton.http_address, "no_such_model", PIXELS, clients=1, per_client=1)


def test_a_trace_that_held_a_batch_of_every_client_is_never_said_to_hold_none():
    """A lesson once ended "groups taking turns, not one batch of 8" under a traced window holding a batch of 8."""
    from servelab.lab.batching_tables import trace_row
    from servelab.triton.trace import RequestSpan

    ms = 1_000_000
    alone = RequestSpan(1, "m", 0, 0, 10 * ms, 11 * ms)
    together = [RequestSpan(i, "m", 1 * ms, 10 * ms, 30 * ms, 31 * ms) for i in (2, 3)]  # one execution of 2
    said = by_hand.trace_alone(trace_row([alone, *together], "own"), {1: 1, 2: 1}, clients=2)
    assert "not one batch of 2" not in said and "all 2 rode together" in said
    said = by_hand.trace_alone(trace_row([alone, *together], "own"), {1: 1, 2: 1}, clients=3)
    assert "not one batch of 3" in said
