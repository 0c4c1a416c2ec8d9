"""Putting an answer into service (servelab.assignments.live): a fragment merged into the model's config, the
trials of the open-ended exercise within their budget, and one measured point against a real tritonserver."""

from __future__ import annotations

import pytest

from servelab.assignments.live import Trials, measure_triton
from servelab.bench.load import LoadOpts
from servelab.bench.results.records import Run, load_records
from servelab.triton.models import CPU_ENCODER

pytestmark = pytest.mark.triton

OPTS = LoadOpts.smoke(max_windows=2, max_warmup_s=1.0)


@pytest.fixture
def run(tmp_path):
    return Run(run_id="assignments", root=tmp_path)


def test_a_trial_sets_the_cpu_models_threads_and_spinning_and_the_trial_budget_is_kept(run):
    from tritonclient.grpc import model_config_pb2

    from servelab.assignments.live import merged_config

    current = {"name": CPU_ENCODER, "max_batch_size": 32, "instance_group": [{"kind": "KIND_CPU", "count": 1}],
               "parameters": {"intra_op_threads": {"string_value": "2"}, "weights": {"string_value": "w"}}}
    frag = model_config_pb2.ModelConfig()
    frag.instance_group.add(kind=model_config_pb2.ModelInstanceGroup.Kind.Value("KIND_CPU"), count=2)
    frag.parameters["intra_op_threads"].string_value = "1"
    merged = merged_config(current, frag)
    assert merged["instance_group"] == [{"kind": "KIND_CPU", "count": 2}]
    assert merged["parameters"] == {"intra_op_threads": {"string_value": "1"}, "weights": {"string_value": "w"}}
    trials = Trials(run, "http://127.0.0.1:9", CPU_ENCODER, OPTS, "t-limit", max_trials=0)
    with pytest.raises(ValueError, match="budget is 0 trials"):
        trials(concurrency=2, instances=2, threads=1)
    assert trials.count == 0


def test_one_point_is_measured_against_the_model_as_it_is_loaded(assignments_triton, run):
    """The point every live check and every trial measures, against a real tritonserver: batch-1 tensors from
    `concurrency` clients, recorded in the run under the check's experiment with its params."""
    rec = measure_triton(run, "t-point", assignments_triton.http_url, CPU_ENCODER, concurrency=2, opts=OPTS,
                         params={"config": "default"})
    assert rec["requests"] > 0 and not rec["errors"], rec.get("error_examples")
    assert (rec["server"], rec["batch"], rec["concurrency"]) == ("triton-http", 1, 2)
    assert [(r["experiment"], r["params"]["config"]) for r in load_records(run.dir)] == [("t-point", "default")]
