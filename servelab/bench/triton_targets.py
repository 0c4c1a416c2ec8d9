"""Triton as a benchmark target, built on the Triton engineer's API (servelab.triton.*): no lifecycle of our own.

`serve_triton(protocol, payload=…, instances=…, max_delay_us=…)` stages a CPU repository into a temporary
folder (servelab.triton.repository.stage), runs the embedded tritonserver (servelab.triton.server.EmbeddedTriton)
on free loopback ports and yields a `Served` whose clients are InferenceClient(backend="triton-http|grpc"),
whose counters are Triton's own statistics (servelab.triton.stats, before/after deltas) and whose
`reconfigure(max_queue_delay_us=…, instances=…)` reloads the model through servelab.triton.control.
`variant(srv, protocol, payload)` reuses the same server with another protocol / payload.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from servelab.bench.targets import Served


def _models(payload: str):
    from servelab.triton.repository import CPU_ENCODER, ENSEMBLE

    return (ENSEMBLE if payload == "jpeg" else CPU_ENCODER), CPU_ENCODER


def _client_maker(srv, protocol: str, payload: str, **options):
    from servelab.client import InferenceClient

    url = srv.http_url if protocol == "http" else srv.grpc_url
    return lambda: InferenceClient(mode="remote", backend=f"triton-{protocol}", url=url, payload=payload, **options)


def _snapshot(http_url: str, models: tuple):
    from servelab.triton.stats import read_stats

    return {m: read_stats(http_url, m) for m in dict.fromkeys(models)}


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


@contextlib.contextmanager
def serve_triton(protocol: str = "http", *, payload: str = "tensor", instances: int = 1, max_delay_us: int | None = None,
                 max_batch: int | None = None, threads: int | None = None, engine: str = "onnx",
                 log_path: Path | None = None, repository: Path | None = None, **_ignored):
    from servelab.config import Settings
    from servelab.triton.control import reconfigure
    from servelab.triton.repository import stage
    from servelab.triton.server import EmbeddedTriton

    if engine != "onnx":
        raise ValueError(f"the embedded Triton CPU model runs the fp32 ONNX graph; engine {engine!r} is not staged")
    tmp = None
    if repository is None:
        tmp = Path(tempfile.mkdtemp(prefix="servelab-bench-triton-"))
        repository = tmp / "models"
    try:
        t0 = time.perf_counter()
        info = stage("cpu", repository, instances=instances, max_delay_us=max_delay_us, max_batch=max_batch,
                     threads=threads, settings=Settings.from_env())
        stage_s = time.perf_counter() - t0
        t1 = time.perf_counter()
        with EmbeddedTriton(repository, log_path=log_path) as srv:
            startup = time.perf_counter() - t1
            model, encoder = _models(payload)
            state = {"instances": instances, "max_queue_delay_us": max_delay_us}
            try:  # what Triton actually loaded (the template's delay when none was given)
                from servelab.triton.control import get_config

                cfg = get_config(srv.http_url, encoder)
                state["max_queue_delay_us"] = int(cfg.get("dynamic_batching", {}).get("max_queue_delay_microseconds", 0))
                state["instances"] = sum(int(g.get("count", 1)) for g in cfg.get("instance_group", [])) or instances
            except Exception:
                pass

            def do_reconfigure(**kw):
                reconfigure(srv.http_url, encoder, repository=repository, **kw)
                state.update({k: v for k, v in kw.items() if v is not None})

            served = Served(
                target=f"triton-{protocol}", backend=f"triton-{protocol}", protocol=protocol, engine="onnx", url=srv.http_url,
                pid=srv.pid, make_client=_client_maker(srv, protocol, payload),
                snapshot=lambda: _snapshot(srv.http_url, (model, encoder)), delta=triton_delta, startup_s=startup,
                extra={"model": model, "instances": instances, "intra_op_threads": info.get("threads"),
                       "max_queue_delay_us": max_delay_us, "stage_s": round(stage_s, 3), "triton": srv,
                       "reconfigure": do_reconfigure, "state": state},
            )
            yield served
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def variant(srv: Served, protocol: str, payload: str) -> Served:
    """The same running Triton with another protocol and/or payload (jpeg -> the ensemble)."""
    triton = srv.extra["triton"]
    model, encoder = _models(payload)
    return replace(srv, target=f"triton-{protocol}", backend=f"triton-{protocol}", protocol=protocol,
                   make_client=_client_maker(triton, protocol, payload),
                   snapshot=lambda: _snapshot(triton.http_url, (model, encoder)),
                   extra={**srv.extra, "model": model})


def public_params(srv: Served) -> dict:
    """The JSON-safe parameters of a Triton point (current instances / queue delay after reloads)."""
    state = srv.extra.get("state", {})
    return {"model": srv.extra.get("model"), "instances": state.get("instances"),
            "max_queue_delay_us": state.get("max_queue_delay_us"), "intra_op_threads": srv.extra.get("intra_op_threads"),
            "server": "embedded tritonserver (python backend, onnxruntime CPU)"}


class TritonJsonClient:
    """Triton HTTP with the input as JSON number lists (binary_data=False): the slow format, measured on purpose.

    Only for the payload experiment; servelab's own Triton backend always sends binary tensors.
    """

    def __init__(self, http_url: str, model: str):
        import tritonclient.http as tc

        self.tc, self.model = tc, model
        self.client = tc.InferenceServerClient(http_url.replace("http://", ""), concurrency=1)

    def embed_tensor(self, batch):
        tc = self.tc
        inp = tc.InferInput("pixel_values", list(batch.shape), "FP32")
        inp.set_data_from_numpy(batch, binary_data=False)
        res = self.client.infer(self.model, [inp], outputs=[tc.InferRequestedOutput("embedding", binary_data=True)])
        return res.as_numpy("embedding")

    def close(self):
        self.client.close()
