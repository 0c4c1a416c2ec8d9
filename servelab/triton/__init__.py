"""Triton: model-repository builder, embedded server lifecycle, management (through tritonclient), statistics.

    servelab.triton.models        the model names (CPU_ENCODER, GPU_ENCODER, TRT_ENCODER, PREPROCESS, ENSEMBLE)
    servelab.triton.repository    stage("cpu"|"gpu", out, instances=, max_delay_us=, ...), parse_config(path)
    servelab.triton.tensorrt      the TensorRT stanza: profile shapes and the rules a config is checked against
    servelab.triton.server        EmbeddedTriton(repository, http_port, grpc_port, metrics_port, log_path)
                                  (context manager; .http_url .grpc_url .metrics_url), TritonStartError
    servelab.triton.control       get_config, load_model, unload_model, model_states, reconfigure
    servelab.triton.server_stats  read_stats, read_metrics, stats_delta (before/after deltas of server-side numbers)
    servelab.triton.trace         tracing(http_url, model) -> spans per request, executions(spans), plot_timeline
    servelab.triton.perf_analyzer find/install NVIDIA's perf_analyzer, command(...), run(...) -> PerfResult
The client side lives in servelab.client.triton (TritonBackend); see each module's docstring.
"""
