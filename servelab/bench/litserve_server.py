"""Peer baseline: the same ONNX Runtime engine served by LitServe (the batching Python server users pick instead).

`python -m servelab.bench.litserve_app --port P [--engine onnx] [--max-batch 16] [--batch-timeout 0.002]`
serves `POST /predict` with JSON `{"image": "<base64 JPEG/PNG>"}` or `{"tensor": "<base64 float32>", "shape": [1,3,224,224]}`
and answers `{"embedding": [...512 floats...]}`. Preprocessing and engine are servelab's own, so the comparison
with the servelab service measures the serving layer only. `LitServeProcess` runs it as a subprocess on a free
loopback port; `LitServeClient` speaks to it with the embed_images / embed_tensor interface of InferenceClient.
"""

from __future__ import annotations

import base64
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np

from servelab.netutil import free_port, port_in_use, wait_http


class LitServeProcess:
    """`with LitServeProcess(engine="onnx") as ls: ls.url` — started on a free loopback port, ready, then stopped."""

    def __init__(self, engine: str = "onnx", port: int | None = None, max_batch: int = 16, batch_timeout: float = 0.002,
                 env: dict | None = None, log_path: Path | None = None, timeout: float = 180.0):
        self.host, self.port = "127.0.0.1", port or free_port()
        self.engine, self.max_batch, self.batch_timeout = engine, max_batch, batch_timeout
        self.env = {k: str(v) for k, v in (env or {}).items()}
        self.log_path, self.timeout = log_path, timeout
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def start(self) -> "LitServeProcess":
        if port_in_use(self.port):
            raise RuntimeError(f"port {self.port} is already in use")
        env = {**os.environ, **self.env, "SERVELAB_ENGINE": self.engine, "LITSERVE_DISABLE_TELEMETRY": "1"}
        out = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "servelab.bench.litserve_app", "--port", str(self.port),
             "--max-batch", str(self.max_batch), "--batch-timeout", str(self.batch_timeout)],
            env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )
        if not wait_http(self.url + "/health", timeout=self.timeout, proc=self.proc):
            code = self.proc.poll()
            self.stop()
            raise RuntimeError(f"LitServe on {self.url} did not become ready (exit code {code})")
        return self

    def stop(self, timeout: float = 10.0) -> None:
        if self.proc and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)  # LitServe forks workers: stop the whole group
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
            except ProcessLookupError:
                pass
        self.proc = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


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

