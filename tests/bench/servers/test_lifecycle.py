"""Records measured on an attached server (the lab's own stack) say so: notebook 09 picks its backend from them."""

from servelab.bench.servers import attach


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
