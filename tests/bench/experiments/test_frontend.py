"""`servelab bench frontend` end to end on tiny windows: a real uvicorn per side (the service on the emulated
near-zero device, the bare-ASGI floor), driven by a real wrk; what is checked is that every side and body kind is
measured and recorded with its client and the emulation named, never how fast anything is."""

from __future__ import annotations

import shutil

import pytest

from servelab.bench.experiments import frontend as fe
from servelab.bench.results.records import Run, load_records

pytestmark = pytest.mark.skipif(not shutil.which("wrk"), reason="wrk is not installed (apt-get install wrk)")


def test_every_side_and_body_is_measured_and_recorded_with_its_client_and_emulation(tmp_path):
    run = Run("frontend-test", root=tmp_path)
    recs = fe.frontend(run, kinds=("tensor", "uint8", "jpeg"), connections=(2,), window_s=1, windows=2,
                       warmup_s=0, quick=True)
    read = load_records(run.dir)
    assert [r["run_id"] for r in read] == [r["run_id"] for r in recs] and len(read) == len(recs)
    load = [r for r in read if r["kind"] == "load"]
    assert {(r["backend"], r["payload"]) for r in load} == {(side, kind) for side in ("floor", "fastapi")
                                                            for kind in ("tensor", "uint8", "jpeg")}
    client = fe.wrk_version()
    for r in load:
        assert r["client"] == client and r["params"]["client"] == client
        assert r["repeats"] == 2 and len(r["params"]["windows"]) == 2
        assert r["requests"] > 0 and r["non_2xx"] == 0
        assert r["requests_per_s_min"] <= r["requests_per_s"] <= r["requests_per_s_max"]
        assert r["server_cpu_ms_per_request"] > 0
        assert r["params"]["device"] == "emulated near-zero"
        if r["server"] == fe.SERVICE:
            assert r["weights"] == "emulated near-zero" and "emulated" in r["note"]
    bytes_by_kind = {r["payload"]: r["params"]["body_bytes"] for r in load}
    assert bytes_by_kind["tensor"] == 4 * bytes_by_kind["uint8"] == 4 * 3 * 224 * 224
    goals = [r for r in read if r["kind"] == "derived"]
    assert len(goals) == 1 and goals[0]["threshold"] == fe.GOAL_RATIO and goals[0]["quick"]
    rows = fe.table_rows(read)
    assert {row["x_floor"] for row in rows if row["side"] == "floor"} == {1.0}
    assert fe.plot(read, run.dir / "frontend.png").stat().st_size > 0


def test_a_body_a_tree_does_not_take_is_recorded_unavailable_not_measured(tmp_path):
    """A body the service refuses (as a tree without uint8 input refuses that kind; here every body is over its
    size limit) is probed once and recorded as unavailable, with the refusal."""
    run = Run("frontend-unavailable", root=tmp_path)
    recs = fe.frontend(run, kinds=("tensor",), connections=(2,), window_s=1, windows=1, warmup_s=0, floor=False,
                       quick=True, env={"SERVELAB_MAX_BODY_BYTES": 1000})
    assert [r["kind"] for r in recs] == ["unavailable"]
    assert "413" in recs[0]["note"] and recs[0]["params"]["side"] == fe.SERVICE


def test_trees_are_label_path_pairs_of_servelab_checkouts(tmp_path):
    here = fe.Path(fe.__file__).resolve().parents[3]
    assert fe.parse_trees(f"after={here}") == {"after": here}
    assert fe.parse_trees(None) is None
    with pytest.raises(ValueError, match="LABEL=PATH"):
        fe.parse_trees("after")
    with pytest.raises(ValueError, match="no servelab/service"):
        fe.parse_trees(f"x={tmp_path}")
