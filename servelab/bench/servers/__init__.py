"""Handles on what is measured: a running server (FastAPI service, LitServe, Triton, the in-process engine), how
it is started or attached to, and the network link between client and server. Experiments take a handle and
never start a server.

Server kinds (the word for them in servelab.bench is *server*): fastapi, litserve, triton-http, triton-grpc,
in-process (servelab.vocabulary.Server).

    with served("triton-grpc", payload="tensor") as srv: …   # start one for the measurement (CLI, tests)
    srv = attach("triton-http", url, model=…)                 # one already running (the lab's stack, a node)
    with network_link("wan-100mbit-20ms", srv) as link: measure(run, exp, link.over(srv), …)
"""

from servelab.bench.servers.handle import Served, reported_machine, this_machine
from servelab.bench.servers.in_process import InProcess, make_embedder
from servelab.bench.servers.lifecycle import (
    ATTACHED,
    attach,
    emulated_device,
    serve_fastapi,
    serve_in_process,
    serve_litserve,
    serve_triton,
    served,
)
from servelab.bench.servers.service_served import LitServed, ServiceServed, service_delta, service_metrics
from servelab.bench.servers.triton_served import TritonJsonClient, TritonJsonServed, TritonServed, triton_delta

# the link's names load on first use: `python -m servelab.bench.servers.link` runs the relay, and a package that
# imported the module first would have Python import it twice
_LINK = ("LOOPBACK", "Link", "LinkProfile", "link_effect", "link_profile", "netem_support", "network_link")

__all__ = [
    "Served", "reported_machine", "this_machine", "InProcess", "make_embedder", "ATTACHED", "attach",
    "emulated_device", "serve_fastapi", "serve_in_process", "serve_litserve", "serve_triton", "served", "LOOPBACK",
    "Link", "LinkProfile", "link_effect", "link_profile", "netem_support", "network_link", "LitServed",
    "ServiceServed", "service_delta", "service_metrics", "TritonJsonClient", "TritonJsonServed", "TritonServed",
    "triton_delta",
]


def __getattr__(name):
    if name in _LINK:
        from servelab.bench.servers import link

        return getattr(link, name)
    raise AttributeError(name)
