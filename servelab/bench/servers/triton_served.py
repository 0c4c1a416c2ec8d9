"""A handle on Triton (HTTP or gRPC, the emulated accelerator's model too): its statistics as per-point deltas, and
its model state (instances, queue delay) changed by a reload.
"""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from servelab.bench.servers.handle import Served
from servelab.errors import InvalidValue
from servelab.model.contract import INPUT_NAME, OUTPUT_NAME, TRITON_DTYPE
from servelab.triton.models import CPU_ENCODER, ENSEMBLE


def triton_delta(before: dict | None, after: dict | None) -> dict | None:
    """Triton's server-side breakdown for the requested model; executed batch sizes from the encoder."""
    if not before or not after:
        return None
    models = list(after)
    front, encoder = models[0], models[-1]
    s = (after[front] - before[front]).summary()
    enc = (after[encoder] - before[encoder]).summary()
    out = {"source": "triton /v2/models/<m>/stats", **{k: v for k, v in s.items() if k != "batch_hist"},
           "requests_ok": s["requests"], "images": s["inferences"],
           "batch_histogram": {str(k): v for k, v in enc["batch_hist"].items()},
           "encoder_executions": enc["executions"], "encoder_avg_batch": enc["avg_batch"]}
    if front != encoder:
        out["note"] = (f"{front} is an ensemble: its queue/compute figures span the whole pipeline "
                       f"(preprocess + encoder); the encoder's own are under server.encoder")
        out["encoder"] = {k: v for k, v in enc.items() if k != "batch_hist"}
        out["avg_batch"] = enc["avg_batch"]  # the ensemble's own count is per request; batching happens in the encoder
    return out


@dataclass
class TritonServed(Served):
    """A running Triton: both endpoints, the encoder and JPEG-ensemble names, and the encoder's loaded state."""

    http_url: str = ""
    grpc_url: str | None = None
    model: str = CPU_ENCODER                     # the encoder (tensor payload)
    jpeg_model: str = ENSEMBLE                   # the ensemble (jpeg payload)
    repository: Path | None = None
    instances: int | None = None
    max_queue_delay_us: int | None = None
    client_options: dict = field(default_factory=dict)
    gpus: list[int] | None = None  # the GPU ids the encoder's instances run on, as the server reports them

    @property
    def front_model(self) -> str:
        return self.jpeg_model if self.payload == "jpeg" else self.model

    def make_client(self):
        from servelab.client import InferenceClient

        url = self.http_url if self.protocol == "http" else self.grpc_url
        return InferenceClient(mode="remote", backend=f"triton-{self.protocol}", url=url, payload=self.payload,
                               model=self.model, jpeg_model=self.jpeg_model, **self.client_options)

    def variant(self, *, payload: str | None = None, protocol: str | None = None) -> TritonServed:
        protocol = protocol or self.protocol
        if protocol == "grpc" and not self.grpc_url:
            raise InvalidValue("no gRPC endpoint known for this Triton (attach it with grpc_url=…)")
        return dataclasses.replace(self, payload=payload or self.payload, protocol=protocol,
                                   server=f"triton-{protocol}")

    def snapshot(self) -> dict | None:
        from servelab.triton.server_stats import read_stats

        return {m: read_stats(self.http_url, m) for m in dict.fromkeys((self.front_model, self.model))}

    def delta(self, before, after):
        return triton_delta(before, after)

    def read_state(self) -> TritonServed:
        """Refresh instances / queue delay from what Triton actually loaded."""
        from servelab.triton.control import get_config

        cfg = get_config(self.http_url, self.model)
        self.max_queue_delay_us = int(cfg.get("dynamic_batching", {}).get("max_queue_delay_microseconds", 0))
        self.instances = sum(int(g.get("count", 1)) for g in cfg.get("instance_group", [])) or self.instances
        # Triton fills each GPU group's `gpus` with every GPU it sees: the server's own GPU count
        self.gpus = sorted({int(d) for g in cfg.get("instance_group", []) if g.get("kind") == "KIND_GPU"
                            for d in g.get("gpus", [])})
        return self

    def reconfigure(self, *, max_queue_delay_us: int | None = None, instances: int | None = None,
                    max_queue: int | None = None) -> None:
        """Reload the encoder with another queue delay, instance count and/or queue bound (repository API)."""
        from servelab.triton.control import reconfigure

        reconfigure(self.http_url, self.model, max_queue_delay_us=max_queue_delay_us, instances=instances,
                    max_queue=max_queue, repository=self.repository)
        self.read_state()

    @contextlib.contextmanager
    def configured(self, *, max_queue_delay_us: int | None = None, instances: int | None = None):
        """`with srv.configured(instances=2):` — the state inside, and the original state restored after."""
        original = {"max_queue_delay_us": self.max_queue_delay_us, "instances": self.instances}
        want = {k: v for k, v in (("max_queue_delay_us", max_queue_delay_us), ("instances", instances))
                if v is not None}
        self.reconfigure(**want)
        try:
            yield self
        finally:
            self.reconfigure(**{k: original[k] for k in want if original[k] is not None})

    def params(self) -> dict:
        return {**super().params(), "model": self.front_model, "instances": self.instances,
                "max_queue_delay_us": self.max_queue_delay_us}


class TritonJsonClient:
    """Triton HTTP with the input as JSON number lists (binary_data=False): the slow format, measured on purpose."""

    def __init__(self, http_url: str, model: str):
        import tritonclient.http as tc

        from servelab.triton.control import address

        self.tc, self.model = tc, model
        self.client = tc.InferenceServerClient(address(http_url), concurrency=1)

    def embed_tensor(self, batch):
        tc = self.tc
        inp = tc.InferInput(INPUT_NAME, list(batch.shape), TRITON_DTYPE)
        inp.set_data_from_numpy(batch, binary_data=False)
        res = self.client.infer(self.model, [inp], outputs=[tc.InferRequestedOutput(OUTPUT_NAME, binary_data=True)])
        return res.as_numpy(OUTPUT_NAME)

    def close(self):
        self.client.close()


@dataclass
class TritonJsonServed(TritonServed):
    """Triton HTTP sent JSON number lists (payload json-lists) — only for the payload experiment."""

    def make_client(self):
        return TritonJsonClient(self.http_url, self.model)


def triton_machine(netloc: str, gpus: list[int] | None) -> str:
    """served_by of a Triton this run did not start: Triton names no host, but its loaded config names its GPUs."""
    on = "its machine unreported" if gpus is None else (f"{len(gpus)} GPU(s)" if gpus else "no GPU instances")
    return f"the Triton server at {netloc} ({on})"
