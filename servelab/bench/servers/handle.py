"""What a benchmark talks to: a typed handle on a running server. Experiments take one and never start servers.

Server kinds (servelab.vocabulary.Server; the word for them in servelab.bench is *server*):

  fastapi      servelab's FastAPI service (payload jpeg | tensor), counters from its Prometheus /metrics
  litserve     the same engine behind LitServe (peer baseline; jpeg as base64 JSON | tensor)
  triton-http  the embedded tritonserver (tensor | jpeg via the ensemble), counters from Triton's statistics
  triton-grpc  idem over gRPC
  in-process   the engine in this process (raw compute, no serving layer)

Two ways to get a handle:

  with served("triton-grpc", payload="tensor") as srv:   # start one for the measurement (CLI, tests)
  srv = attach("triton-http", url, model=…)              # a server already running (the lab's stack, a node)

Every handle has `worker_factory(payload, batch)` for the load generator, `snapshot()` / `delta()` (the server's
own counters before/after a point), `params()` (JSON-safe settings for the record), `pid` (for RSS) and
`variant(payload=…, protocol=…)` (the same server, clients sending another payload / protocol). `TritonServed`
also holds the model state (instances, queue delay) and changes it with `reconfigure()` (a model reload).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from servelab.errors import InvalidValue


@dataclass
class Served:
    """A running server and how to load it. Subclasses say how clients are made and counters read."""

    server: str
    engine: str
    url: str | None
    pid: int | None = None
    payload: str = "tensor"
    protocol: str = "http"
    startup_s: float | None = None
    settings: dict = field(default_factory=dict)  # JSON-safe settings (max_batch, …) for the record
    served_by: str = ""  # which machine answers (every record's params.served_by): see this_machine / attach

    @property
    def backend(self) -> str:
        return self.server

    def make_client(self):
        raise NotImplementedError

    def worker_factory(self, payload: str, batch: int):
        """Load-generator worker factory: each worker its own client sending `batch` images as `payload`."""
        from servelab.bench.load.inputs import sample_jpegs, sample_tensor
        from servelab.bench.load.workers import client_factory

        srv = self.variant(payload=payload) if payload != self.payload and payload != "json-lists" else self
        if payload in ("tensor", "json-lists"):
            return client_factory(srv.make_client, tensor=sample_tensor(batch))
        return client_factory(srv.make_client, blobs=list(sample_jpegs(batch)))

    def variant(self, *, payload: str | None = None, protocol: str | None = None) -> Served:
        if protocol not in (None, self.protocol):
            raise InvalidValue(f"{self.server} speaks {self.protocol} only")
        return dataclasses.replace(self, payload=payload or self.payload)

    def snapshot(self) -> dict | None:
        return None

    def delta(self, before: dict | None, after: dict | None) -> dict | None:
        return None

    def params(self) -> dict:
        scalars = {k: v for k, v in self.settings.items() if isinstance(v, (int, float, str, bool, type(None)))}
        return {**scalars, "served_by": self.served_by or None}


def this_machine() -> str:
    """served_by of a server this process started (and of the in-process engine): where the notebook runs."""
    from servelab.fingerprint import machine, machine_label

    return f"this machine ({machine_label(machine())})"


def reported_machine(url: str, netloc_of: str) -> str:
    """served_by of a running servelab service: the machine its /info reports about itself."""
    import httpx

    try:
        m = httpx.get(url.rstrip("/") + "/info", timeout=10).json().get("machine")
    except (httpx.HTTPError, ValueError, AttributeError):
        m = None
    from servelab.fingerprint import machine_label

    return machine_label(m) if isinstance(m, dict) else f"the {netloc_of} (its machine unreported)"
