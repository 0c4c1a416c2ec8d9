"""Peer baseline: the same ONNX Runtime engine served by LitServe (the batching Python server users pick instead).

`python -m servelab.bench.servers.litserve_app --port P [--engine onnx] [--max-batch 16] [--batch-timeout 0.002]`
serves `POST /predict` with JSON `{"image": "<base64 JPEG/PNG>"}` or `{"tensor": "<base64 float32>", "shape": [1,3,224,224]}`
and answers `{"embedding": [...512 floats...]}`. Preprocessing and engine are servelab's own, so the comparison
with the servelab service measures the serving layer only. `LitServeProcess` runs it as a subprocess on a free
loopback port; `LitServeClient` speaks to it with the embed_images / embed_tensor interface of InferenceClient.
"""

from __future__ import annotations

import base64
import os
import sys
from pathlib import Path

import numpy as np

from servelab.managed_process import ManagedProcess
from servelab.netutil import free_port


class LitServeProcess(ManagedProcess):
    """`with LitServeProcess(engine="onnx") as ls: ls.url` — started on a free loopback port, ready, then stopped
    (LitServe forks workers: the whole process group goes)."""

    name = "LitServe"

    def __init__(self, engine: str = "onnx", port: int | None = None, max_batch: int = 16, batch_timeout: float = 0.002,
                 env: dict | None = None, log_path: Path | None = None, timeout: float = 180.0):
        super().__init__(log_path=log_path, startup_timeout=timeout)
        self.port = port or free_port()
        self.engine, self.max_batch, self.batch_timeout = engine, max_batch, batch_timeout
        self.env = {k: str(v) for k, v in (env or {}).items()}

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def ready_url(self) -> str:
        return self.url + "/health"

    def command(self) -> list[str]:
        return [sys.executable, "-m", "servelab.bench.servers.litserve_app", "--port", str(self.port),
                "--max-batch", str(self.max_batch), "--batch-timeout", str(self.batch_timeout)]

    def environment(self) -> dict:
        return {**os.environ, **self.env, "SERVELAB_ENGINE": self.engine, "LITSERVE_DISABLE_TELEMETRY": "1"}

    def ports(self) -> dict[str, tuple[int, str]]:
        return {"LitServe": (self.port, "port=")}


class LitServeClient:
    """One pooled connection to a LitServe /predict endpoint, one image per request (what LitServe batches)."""

    def __init__(self, url: str, timeout: float = 60.0):
        import httpx

        self.url = url.rstrip("/")
        self.http = httpx.Client(base_url=self.url, timeout=timeout,
                                 limits=httpx.Limits(max_connections=1, max_keepalive_connections=1))

    def _post(self, body: dict) -> np.ndarray:
        from servelab.client.errors import InferenceError

        r = self.http.post("/predict", json=body)
        if r.status_code != 200:
            raise InferenceError(r.text[:300], status=r.status_code, backend="litserve")
        return np.asarray(r.json()["embedding"], dtype=np.float32)[None]

    def embed_images(self, blobs) -> np.ndarray:
        return np.concatenate([self._post({"image": base64.b64encode(b).decode()}) for b in blobs])

    def embed_tensor(self, batch: np.ndarray) -> np.ndarray:
        batch = np.ascontiguousarray(batch, dtype="<f4")
        return np.concatenate([self._post({"tensor": base64.b64encode(x.tobytes()).decode(), "shape": [1, *x.shape]})
                               for x in batch])

    def close(self) -> None:
        self.http.close()

