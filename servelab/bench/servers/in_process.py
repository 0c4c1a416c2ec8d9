"""The engine in this process as a handle: raw compute, the baseline a served figure is divided by."""

from __future__ import annotations

from dataclasses import dataclass

from servelab.bench.servers.handle import Served
from servelab.errors import InvalidValue


@dataclass
class InProcess(Served):
    """The engine in this process: raw compute, the baseline a served figure is divided by."""

    embedder: object = None

    def worker_factory(self, payload: str, batch: int):
        from servelab.bench.load.inputs import sample_tensor
        from servelab.bench.load.workers import embedder_factory

        if payload != "tensor":
            raise InvalidValue("in-process measures the engine on tensors only")
        return embedder_factory(self.embedder, sample_tensor(batch))

    def make_client(self):
        raise TypeError("in-process has no client: use worker_factory")

    def params(self) -> dict:
        return {"threads": getattr(self.embedder, "threads", None), "provider": getattr(self.embedder, "provider", None),
                "served_by": self.served_by or None}


def make_embedder(engine: str, provider: str = "cpu", threads: int = 0, settings=None):
    """`settings` (servelab.config.Settings, default: from the environment) for what the arguments leave open."""
    from servelab.config import Settings
    from servelab.model.engines import make_embedder as _make

    return _make(settings or Settings.from_env(), engine=engine, provider=provider, threads=threads or None)
