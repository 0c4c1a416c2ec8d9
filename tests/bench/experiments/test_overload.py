"""`servelab bench overload` on two real copies of the service (uvicorn on loopback): the copy with admission
control and the one without are offered the same arrival rates, from one capacity measurement."""

from __future__ import annotations

from servelab.bench.experiments.overload import EXPERIMENT, knee_rows, overload
from servelab.bench.results.records import Run


def test_the_two_service_copies_share_one_capacity_and_get_the_same_arrivals(onnx_meta, tmp_path):
    recs = overload(Run("overload", root=tmp_path), servers=("fastapi", "fastapi-no-admission"), engine="onnx",
                    levels=(1, 2), queue=16, quick=True)
    capacity = [r for r in recs if r.get("kind") == "load" and r["params"].get("phase") == "capacity"]
    assert [r["server"] for r in capacity] == ["fastapi"]
    rows = knee_rows(recs)
    assert {(r["server"], r["level"]) for r in rows} == {(s, lv) for s in ("fastapi", "fastapi-no-admission")
                                                         for lv in (1, 2)}
    rate = {(r["server"], r["level"]): r["offered_rps"] for r in rows}
    assert rate[("fastapi", 1)] > 0
    for level in (1, 2):
        assert rate[("fastapi-no-admission", level)] == rate[("fastapi", level)]
    copies = [r for r in recs if r.get("experiment") == EXPERIMENT and r.get("server") == "fastapi-no-admission"
              and r.get("kind") == "load"]
    assert {r["params"]["capacity_measured_on"] for r in copies} == {"fastapi"}
    # the gate's wait budget is on in the copy with admission and off in the other; client and server were placed
    # on separate cores where the machine has two (what was done is recorded either way)
    load = [r for r in recs if r.get("kind") == "load"]
    budgets = [r["params"]["max_wait_ms"] for r in load if r["server"] == "fastapi"]
    assert budgets and all(b >= 250 for b in budgets)  # the default: one full batch at the engine's pace, >= 250 ms
    assert {r["params"]["wait_budget"] for r in load if r["server"] == "fastapi"} == {"auto"}
    assert {r["params"]["max_wait_ms"] for r in load if r["server"] == "fastapi-no-admission"} == {None}
    assert all(r["params"]["cpu_pinning"] for r in load)
    goals = {r["goal"]: r for r in recs if r.get("kind") == "derived"}
    for server in ("fastapi", "fastapi-no-admission"):
        for goal, op, threshold in ((f"{server}: goodput at 2x capacity / goodput at 1x", ">=", 0.9),
                                    (f"{server}: accepted p99 at 2x capacity / accepted p99 at 1x", "<=", 2.0),
                                    (f"{server}: 5xx answers other than 503", "<=", 0)):
            assert (goals[goal]["op"], goals[goal]["threshold"]) == (op, threshold), goal
