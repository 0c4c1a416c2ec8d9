"""Triton's own request trace, from a real tritonserver: turned on and off through the trace API, read back as
one span per request, grouped into the executions Triton's statistics count; and a config.pbtxt edited as text
and loaded into the running server with a plain repository-API request."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import tritonclient.http as th
from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2

from servelab.triton import trace
from servelab.triton.server_stats import stats_delta

pytestmark = pytest.mark.triton

ENCODER = "openclip_vit_b32_cpu"


def send_from_clients(srv, clients: int, per_client: int) -> None:
    pixels = np.zeros((1, 3, 224, 224), dtype=np.float32)
    errors = []

    def worker():
        client = th.InferenceServerClient(srv.http_address)  # one client per thread: they are not thread-safe
        try:
            for _ in range(per_client):
                inp = th.InferInput("pixel_values", list(pixels.shape), "FP32")
                inp.set_data_from_numpy(pixels)
                client.infer(ENCODER, [inp])
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            client.close()

    threads = [threading.Thread(target=worker) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_the_server_starts_with_a_trace_file_and_tracing_off(triton):
    settings = th.InferenceServerClient(triton.http_address).get_trace_settings(headers=triton.headers)
    assert settings["trace_level"] == ["OFF"]
    assert trace.trace_file(triton.http_url) == triton.trace_path


def test_trace_groups_concurrent_requests_into_the_executions_triton_counts(triton, tmp_path):
    clients, per_client = 8, 3
    with trace.tracing(triton.http_url, ENCODER) as window, \
            stats_delta(triton.http_url, ENCODER, expected_requests=clients * per_client) as d:
        send_from_clients(triton, clients, per_client)
    spans = window.spans(expected=clients * per_client)
    assert len(spans) == clients * per_client  # every request of the window, none from before it
    assert all(s.model == ENCODER for s in spans)
    assert all(s.queue_start <= s.compute_start < s.compute_end <= s.request_end for s in spans)
    runs = trace.executions(spans)
    stats = d.result.summary()
    # the trace's executions are the ones Triton's statistics counted, batch size by batch size
    assert len(runs) == stats["executions"]
    assert trace.batch_histogram(runs) == stats["batch_hist"]
    assert max(r.size for r in runs) > 1  # eight clients at once: the dynamic batcher ran some together
    # an execution's requests all wait in the queue until its compute starts
    for r in runs:
        members = [s for s in spans if s.trace_id in r.trace_ids]
        assert all(s.queue_start <= r.compute_start for s in members)
    assert trace.plot_timeline(spans, tmp_path / "timeline.png").stat().st_size > 0
    # tracing is off again after the window: later requests add nothing to it
    after = th.InferenceServerClient(triton.http_address).get_trace_settings(ENCODER, headers=triton.headers)
    assert after["trace_level"] == ["OFF"]
    send_from_clients(triton, 1, 1)
    assert len(window.spans()) == clients * per_client


def test_read_objects_reads_a_list_the_server_has_not_closed():
    text = '[{"id":1,"model_name":"m"},{"id":1,"timestamps":[{"name":"QUEUE_START","ns":5}]},{"id":2,"tim'
    assert read_ids(text) == [1, 1]
    assert read_ids(',{"id":3}]') == [3]  # a window that starts mid-file


def read_ids(text):
    return [o["id"] for o in trace.read_objects(text)]


def test_a_config_pbtxt_edited_as_text_and_loaded_by_hand_changes_the_running_server(triton, triton_repo):
    client = th.InferenceServerClient(triton.http_address)
    pbtxt = (triton_repo / ENCODER / "config.pbtxt").read_text()
    own = json_format.MessageToJson(text_format.Parse(pbtxt, model_config_pb2.ModelConfig()),
                                preserving_proto_field_name=True)
    edited = text_format.Parse(pbtxt, model_config_pb2.ModelConfig())
    edited.ClearField("dynamic_batching")  # the edit: dynamic batching off
    try:
        client.load_model(ENCODER, config=json_format.MessageToJson(edited), headers=triton.headers)
        assert "dynamic_batching" not in client.get_model_config(ENCODER)
        send_from_clients(triton, 4, 1)  # and it serves
        edited = text_format.Parse(pbtxt, model_config_pb2.ModelConfig())
        edited.dynamic_batching.max_queue_delay_microseconds = 12345
        client.load_model(ENCODER, config=json_format.MessageToJson(edited), headers=triton.headers)
        loaded = client.get_model_config(ENCODER)
        assert int(loaded["dynamic_batching"]["max_queue_delay_microseconds"]) == 12345
    finally:
        # the file's own config back (an override stays until replaced)
        client.load_model(ENCODER, config=own, headers=triton.headers)
    file_delay = text_format.Parse(pbtxt, model_config_pb2.ModelConfig()).dynamic_batching.max_queue_delay_microseconds
    assert int(client.get_model_config(ENCODER)["dynamic_batching"]["max_queue_delay_microseconds"]) == file_delay


def test_each_of_two_small_windows_in_a_row_holds_its_own_requests(triton):
    """Triton holds back the trace of the last request it traced until another one comes: the window's closing
    request pushes it out, and each window keeps only the requests that reached the queue while it was open."""
    for _ in range(2):
        with trace.tracing(triton.http_url, ENCODER) as window:
            send_from_clients(triton, 2, 1)
        spans = window.spans(expected=2)
        assert len(spans) == 2
        assert all(window.opened_ns <= s.queue_start <= window.closed_ns for s in spans)
