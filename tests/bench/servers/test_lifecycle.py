"""Handles on servers: records measured on an attached server (the lab's own stack) say so, as notebook 09 picks
its backend from them; servers started on the emulated accelerator name the emulated device in every record, so
no figure measured on it passes for a model's."""

import pytest

from servelab.bench.experiments import measure
from servelab.bench.load import LoadOpts
from servelab.bench.results.records import Run
from servelab.bench.servers import attach, served
from servelab.triton.models import EMULATED_ENCODER


def test_attached_handles_mark_their_records_and_keep_the_mark_across_variants():
    for server in ("fastapi", "litserve", "triton-http"):
        srv = attach(server, "http://127.0.0.1:9", engine="onnx")  # nothing needs to listen: no request is sent
        assert srv.params()["attached"] is True
        assert srv.variant(payload="jpeg").params()["attached"] is True


def test_records_say_which_machine_served_them(service, tmp_path):
    """A service attached without a pid (a node's stack) is labelled with the machine its /info reports about
    itself, not with the client's; one this run started (pid) is `this machine`; the label reaches the record."""
    import httpx

    from servelab.bench.experiments import measure
    from servelab.bench.load import LoadOpts
    from servelab.bench.results.records import Run
    from servelab.fingerprint import machine_label

    reported = httpx.get(service.url + "/info", timeout=10).json()["machine"]
    assert {"hostname", "cpu_model", "cpu_usable", "gpus"} <= set(reported)
    remote = attach("fastapi", service.url, engine="onnx")
    assert remote.served_by == machine_label(reported) and not remote.served_by.startswith("this machine")
    assert attach("fastapi", service.url, engine="onnx", pid=service.proc.pid).served_by.startswith("this machine (")
    rec = measure(Run(root=tmp_path), "t-served-by", remote, opts=LoadOpts.smoke())
    assert rec["params"]["served_by"] == machine_label(reported)


def test_servers_that_cannot_say_are_labelled_by_address():
    assert attach("triton-http", "http://127.0.0.1:9").served_by == \
        "the Triton server at 127.0.0.1:9 (its machine unreported)"
    assert attach("litserve", "http://127.0.0.1:9").served_by == "the LitServe server at 127.0.0.1:9"
    assert attach("fastapi", "http://127.0.0.1:9", engine="onnx").served_by == \
        "the service at 127.0.0.1:9 (its machine unreported)"


def test_a_triton_elsewhere_is_labelled_with_the_gpus_it_reports(bench_triton):
    """Attached without a pid, a Triton is labelled by its address and what its loaded config says it runs on
    (here CPU instances: no GPU); the one the bench started is this machine."""
    assert bench_triton.served_by.startswith("this machine (")
    remote = attach("triton-http", bench_triton.http_url, model=bench_triton.model)
    assert remote.gpus == [] and remote.served_by.endswith("(no GPU instances)")
    assert remote.params()["served_by"] == remote.served_by


@pytest.fixture
def flat_device(tmp_path, monkeypatch):
    monkeypatch.setenv("SERVELAB_DEVICE_PROFILE", "flat")
    monkeypatch.setenv("SERVELAB_DEVICE_DIR", str(tmp_path / "devices"))


@pytest.mark.parametrize("server", ["in-process", "fastapi", pytest.param("triton-http", marks=pytest.mark.triton)])
def test_records_measured_on_the_emulated_engine_name_the_device(server, flat_device, tmp_path, onnx_meta):
    run = Run(run_id="emulated", root=tmp_path / "results", weights="test")
    with served(server, engine="emulated", log_path=tmp_path / f"{server}.log") if server != "in-process" \
            else served(server, engine="emulated") as srv:
        rec = measure(run, "emulated", srv, payload="tensor", batch=2, opts=LoadOpts.smoke())
        if server == "triton-http":
            assert srv.model == EMULATED_ENCODER
    assert rec["engine"] == "emulated" and rec["errors"] == 0
    label = rec["provider"] if server == "in-process" else rec["params"]["device"]
    assert label == "emulated flat"
