"""Check functions for the lab's exercises: each verifies a student's answer against this run's own table
(or Triton's config schema, or the running stack) and prints PASS or a hint that never contains the expected
answer.

Every check takes `answer` first — a value, or the student's exercise function, which the check calls with
the inputs listed in its docstring — then the data, then keywords: `exercise="04.1"` (the id the grader
reports), `step=step` (the notebook's servelab.lab.step.Step: results are also recorded under its out_dir),
`strict=None` (raise ExerciseFailed on a failure; default from SERVELAB_CHECKS_STRICT). Each returns the
CheckResult. The expected answer is computed inside the check from the same table the notebook shows, so a
check passes for whatever this run measured — there is no answer key.

Tables may be DataFrames or lists of dicts (records). Column names follow the bench records
(`latency_p99_ms`, `throughput_img_s`, `bytes_per_request`, …); where a notebook names a column differently
it passes the name explicitly.

    from servelab.assignments import checks
    checks.outcome(read_outcome, records, key="server", a="fastapi", b="triton-http", exercise="04.1", step=step)

The pure checks read tables and text and start nothing: predictions (predict, then measure: the bands and the
reading of servelab.bench.report), measured (answers read off a table), sizing (replicas, cost), config_answers
(config.pbtxt, probes, healthchecks, providers, perf_analyzer command lines), over the table helpers in
answer_tables. by_hand runs a call the student makes by hand (one request to the service, one ONNX Runtime
session) and reports what happened. The live checks put an answer into the running stack: live_configs (a stanza loaded into Triton and measured, the p99 budget,
a config edited on disk and its load request, perf_analyzer lines run, /stats read),
emulated_plan (a plan on the emulated accelerator), live_code (a client call, a python-backend execute, a
FastAPI route) and live_requests (a JPEG sent to the ensemble, a configuration loaded, a PromQL query put to
Prometheus), through servelab.assignments.live.
"""

from servelab.assignments.checks.by_hand import hand_request, ort_session
from servelab.assignments.checks.config_answers import (
    batching_stanza,
    compose_healthcheck,
    execution_providers,
    gpu_instance_group,
    k8s_probes,
    perf_analyzer_lines,
    trt_accelerator_stanza,
)
from servelab.assignments.checks.emulated_plan import QUICK_PLAN_TOL, emulated_plan
from servelab.assignments.checks.live_code import (
    L2NORM_CONFIG,
    fastapi_route,
    python_backend_execute,
    triton_client_call,
)
from servelab.assignments.checks.live_configs import (
    config_on_disk,
    live_config,
    loaded_from_disk,
    p99_budget,
    perf_analyzer_sweep,
    stats_avg_batch,
)
from servelab.assignments.checks.live_requests import graph_loaded, loaded_config, promql_rates, triton_jpeg_call
from servelab.assignments.checks.measured import (
    best_choice,
    difference,
    queue_delay_for_budget,
    scaling_efficiency,
    share,
    smallest_payload,
    speedup,
    threshold_for_precision,
)
from servelab.assignments.checks.predictions import NO_SPREAD, TIE, measured_bands, outcome, reading
from servelab.assignments.checks.sizing import cost_per_1k_images, replicas_for_load

__all__ = [
    "outcome", "live_config", "p99_budget", "emulated_plan", "triton_client_call", "python_backend_execute", "fastapi_route",
    "queue_delay_for_budget", "batching_stanza", "gpu_instance_group", "trt_accelerator_stanza",
    "smallest_payload", "best_choice", "speedup", "difference", "share", "scaling_efficiency", "cost_per_1k_images",
    "threshold_for_precision", "replicas_for_load", "execution_providers", "k8s_probes", "compose_healthcheck",
    "perf_analyzer_lines", "hand_request", "ort_session", "triton_jpeg_call", "loaded_config", "graph_loaded",
    "promql_rates",
    "config_on_disk", "loaded_from_disk", "perf_analyzer_sweep", "stats_avg_batch",
    "measured_bands", "reading", "TIE", "NO_SPREAD", "QUICK_PLAN_TOL", "L2NORM_CONFIG",
]
# the check functions an exercise may call (the exercise format test holds the notebooks to this list)
CHECKS = tuple(n for n in __all__ if n not in ("measured_bands", "reading", "TIE", "NO_SPREAD", "QUICK_PLAN_TOL",
                                                "L2NORM_CONFIG"))
