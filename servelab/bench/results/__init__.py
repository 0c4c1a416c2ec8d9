"""Results: the records a run writes (results/<run-id>/records.jsonl), the pass/fail goals derived from them, two
runs compared point by point (servelab.bench.results.compare.compare, `servelab bench compare A B`) and the
committed reference runs on real GPUs.

    run = Run("my-run");  run.record("service", kind="load", …);  records_frame(load_records(run.dir))
"""

from servelab.bench.results.compare import Comparison
from servelab.bench.results.goals import (
    goal_record,
    peer_goals,
    ratio_goal,
    scaling_efficiency,
    service_goals,
    triton_goals,
)
from servelab.bench.results.records import (
    KINDS,
    RECORD_SCHEMA,
    Run,
    atomic_write,
    environment_fingerprint,
    load_records,
    make_record,
    memory_snapshot,
    new_run_id,
    records_frame,
    resolve_run_dir,
    upgrade_record,
    validate_record,
)
from servelab.bench.results.reference import reference_line

__all__ = [
    "Comparison", "goal_record", "peer_goals", "ratio_goal", "scaling_efficiency", "service_goals", "triton_goals",
    "KINDS", "RECORD_SCHEMA", "Run", "atomic_write", "environment_fingerprint", "load_records", "make_record",
    "memory_snapshot", "new_run_id", "records_frame", "resolve_run_dir", "upgrade_record", "validate_record",
    "reference_line",
]
