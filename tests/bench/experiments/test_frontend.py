"""`servelab bench frontend` end to end on tiny windows: a real server per side (the service and LitServe on the
emulated near-zero device, the bare-ASGI floor, a real tritonserver with the emulated model staged from the same
profile file), driven by a real wrk (and a real perf_analyzer for Triton); what is checked is that every side
and body kind is measured or recorded unavailable with its reason, with its client, machine and emulation named,
never how fast anything is."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from servelab.bench.experiments import frontend as fe
from servelab.bench.results.records import Run, load_records
from servelab.triton import perf_analyzer as pa

pytestmark = pytest.mark.skipif(not shutil.which("wrk"), reason="wrk is not installed (apt-get install wrk)")
needs_perf_analyzer = pytest.mark.skipif(pa.find() is None, reason="perf_analyzer is not here (`servelab triton "
                                                                    "get-perf-analyzer` fetches it)")


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    """One tiny run of every side (Triton only where perf_analyzer is here): (records returned, records read)."""
    run = Run("frontend-test", root=tmp_path_factory.mktemp("frontend"))
    recs = fe.frontend(run, kinds=("tensor", "uint8", "jpeg"), connections=(2,), window_s=1, windows=2,
                       warmup_s=0, quick=True, triton=pa.find() is not None)
    return run, recs, load_records(run.dir)


def _load(read, side=None):
    return [r for r in read if r["kind"] == "load" and (side is None or r["backend"] == side)]


def test_every_side_and_body_is_measured_and_recorded_with_its_client_and_emulation(quick_run):
    run, recs, read = quick_run
    assert [r["run_id"] for r in read] == [r["run_id"] for r in recs] and len(read) == len(recs)
    measured = {(r["backend"], r["payload"]) for r in _load(read)}
    assert {(side, kind) for side in ("floor", "fastapi") for kind in ("tensor", "uint8", "jpeg")} <= measured
    assert {("litserve", "tensor"), ("litserve", "jpeg")} <= measured
    wrk = fe.wrk_version()
    for r in _load(read):
        assert r["params"]["served_by"].startswith("this machine")
        assert r["client"] == r["params"]["client"]
        assert r["repeats"] == 2 and len(r["params"]["windows"]) == 2
        assert r["requests"] > 0 and r["non_2xx"] == 0
        assert r["requests_per_s_min"] <= r["requests_per_s"] <= r["requests_per_s_max"]
        assert r["server_cpu_ms_per_request"] > 0
        assert r["params"]["device"] == "emulated near-zero"
        if r["params"]["client_kind"] == fe.WRK:
            assert r["client"] == wrk
        if r["server"] != fe.FLOOR:
            assert r["engine"] == "emulated" and r["weights"] == "emulated near-zero" and "emulated" in r["note"]
    bytes_by_kind = {r["payload"]: r["params"]["body_bytes"] for r in _load(read, "fastapi")}
    assert bytes_by_kind["tensor"] == 4 * bytes_by_kind["uint8"] == 4 * 3 * 224 * 224
    assert {r["params"]["body_format"] for r in _load(read, "litserve")} == {"json-base64"}
    goals = [r for r in read if r["kind"] == "derived"]
    assert len(goals) == 1 and goals[0]["threshold"] == fe.GOAL_RATIO and goals[0]["quick"]
    rows = fe.table_rows(read)
    assert {row["x_floor"] for row in rows if row["side"] == "floor"} == {1.0}
    assert fe.plot(read, run.dir / "frontend.png").stat().st_size > 0


def test_what_litserve_cannot_take_is_recorded_unavailable_with_litserves_answer(quick_run):
    _, _, read = quick_run
    gone = {(r["payload"], r["params"].get("body_format")): r for r in read
            if r["kind"] == "unavailable" and r["server"] == fe.LITSERVE}
    assert set(gone) == {("uint8", None), ("tensor", "binary")}
    binary = gone[("tensor", "binary")]["note"]
    assert "refused (HTTP" in binary and "JSON" in binary  # the probe's own answer, and what LitServe takes
    assert not [r for r in _load(read, "litserve") if r["payload"] == "uint8"]


@needs_perf_analyzer
def test_triton_is_driven_by_perf_analyzer_with_tensor_and_uint8_and_says_the_clients_differ(quick_run, tmp_path):
    _, _, read = quick_run
    triton = {r["payload"]: r for r in _load(read, "triton")}
    assert set(triton) == {"tensor", "uint8"}
    for r in triton.values():
        assert r["server"] == fe.TRITON and r["params"]["client_kind"] == fe.PERF_ANALYZER
        assert r["client"].startswith("perf_analyzer") and r["client"] != fe.wrk_version()
        assert r["params"]["like_for_like_clients"] is False and fe.NOT_LIKE_FOR_LIKE in r["note"]
        assert r["weights"] == "emulated near-zero"
        # concurrency = the connections (one more at moments: perf_analyzer reads Triton's statistics on its own)
        held = [w["connections_held"] for w in r["params"]["windows"]]
        assert 2 <= max(held) <= 3, held
    assert triton["tensor"]["params"]["body_bytes"] == 4 * triton["uint8"]["params"]["body_bytes"]
    assert (triton["tensor"]["params"]["model"], triton["uint8"]["params"]["model"]) == \
        ("openclip_vit_b32_emulated", "openclip_vit_b32_emulated_uint8")  # the uint8 pixels go to its variant
    [jpeg] = [r for r in read if r["kind"] == "unavailable" and r["server"] == fe.TRITON]
    assert jpeg["payload"] == "jpeg" and "emulated" in jpeg["note"]
    assert {row["client"] for row in fe.table_rows(read) if row["side"] == "triton"} == {fe.PERF_ANALYZER}
    assert "not a like-for-like comparison of clients" in fe.clients_sentence(read)


def test_a_body_a_tree_does_not_take_is_recorded_unavailable_not_measured(tmp_path):
    """A body the service refuses (as a tree without uint8 input refuses that kind; here every body is over its
    size limit) is probed once and recorded as unavailable, with the refusal."""
    run = Run("frontend-unavailable", root=tmp_path)
    recs = fe.frontend(run, kinds=("tensor",), connections=(2,), window_s=1, windows=1, warmup_s=0, floor=False,
                       litserve=False, triton=False, quick=True, env={"SERVELAB_MAX_BODY_BYTES": 1000})
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


def test_a_service_from_another_tree_runs_that_trees_code(tmp_path):
    """The "before" side of a before/after must be the other checkout's code, whatever folder the benchmark runs from
    (`python -m` looks in its working directory before PYTHONPATH)."""
    import httpx

    import servelab

    tree = tmp_path / "other-tree"
    shutil.copytree(Path(servelab.__file__).parent, tree / "servelab", ignore=shutil.ignore_patterns("__pycache__"))
    init = tree / "servelab" / "__init__.py"
    init.write_text(init.read_text().replace(f'__version__ = "{servelab.__version__}"', '__version__ = "0.0-other"'))
    _, profile = fe.near_zero_profile(tmp_path)
    env = {"SERVELAB_ENGINE": "emulated", "SERVELAB_DEVICE_PROFILE": str(profile),
           "SERVELAB_DEVICE_DIR": str(tmp_path / "devices")}
    with fe.PinnedService(cores=None, tree=tree, env=env, log_path=tmp_path / "service.log") as svc:
        assert httpx.get(svc.url + "/info", timeout=30).json()["version"] == "0.0-other"
