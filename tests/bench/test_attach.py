"""Records measured on an attached server (the lab's own stack) say so: notebook 09 picks its backend from them."""

from servelab.bench.servers import attach


def test_attached_handles_mark_their_records_and_keep_the_mark_across_variants():
    for server in ("fastapi", "litserve", "triton-http"):
        srv = attach(server, "http://127.0.0.1:9", engine="onnx")  # nothing needs to listen: no request is sent
        assert srv.params()["attached"] is True
        assert srv.variant(payload="jpeg").params()["attached"] is True
