"""Triton: model-repository builder, embedded server lifecycle, live reconfiguration, stats and metrics readers.

    servelab.triton.repository  stage(target="cpu"|"gpu", out, instances=, max_delay_us=, ...), parse_config(path)
    servelab.triton.server      EmbeddedTriton(repository, http_port, grpc_port, metrics_port, log_path)
                                (context manager; .http_url .grpc_url .metrics_url), TritonStartError
    servelab.triton.control     reconfigure(http_url, model, max_queue_delay_us=, instances=), get_config, load_model
    servelab.triton.stats       read_stats, read_metrics, stats_delta (before/after deltas of server-side numbers)
The client side lives in servelab.client.triton (TritonBackend); see each module's docstring.
"""
