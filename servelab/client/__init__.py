"""InferenceClient: one way to get embeddings, wherever the model runs.

mode    local   the engine runs in this process
        remote  a server does the work (backend fastapi | triton-http | triton-grpc)
        auto    remote when the server answers ready, otherwise local — and it says so, once
payload jpeg    send the image file bytes as they are (JPEG/PNG/WebP; the server decodes)
        tensor  decode and preprocess here, send float32 [N, 3, 224, 224]

A remote request the server refuses for now (503 overloaded / warming up, 429) is retried, waiting as long
as the server's Retry-After asks, at most `retries` times within `retry_budget_s` (retries=0 turns it off).
A client holds one pooled connection and is not meant to be shared between threads: give each worker its own.
The client never imports the server's code; it speaks HTTP or gRPC.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
from PIL import Image

from servelab.client.base import Backend
from servelab.client.errors import InferenceError, ServiceUnavailable
from servelab.client.retry import retrying
from servelab.errors import InvalidValue
from servelab.model.contract import EMBED_DIM
from servelab.model.preprocess import preprocess_batch
from servelab.vocabulary import REMOTE_SERVERS, TRITON_SERVERS, ClientMode, Payload, Server, word

log = logging.getLogger("servelab.client")

__all__ = ["InferenceClient", "InferenceError", "ServiceUnavailable", "ClientMode", "Payload", "make_remote_backend"]


def make_remote_backend(backend: str, url: str | None = None, timeout: float = 60.0, **options) -> Backend:
    if backend == Server.FASTAPI:
        from servelab.client.fastapi import FastAPIBackend

        return FastAPIBackend(url, timeout=timeout)
    if backend in TRITON_SERVERS:
        from servelab.client.triton import TritonBackend

        return TritonBackend(protocol=Server(backend).protocol, url=url, timeout=timeout, **options)
    raise InvalidValue(f"backend must be one of {', '.join(REMOTE_SERVERS)}, got {backend!r}")


class InferenceClient:
    def __init__(
        self,
        mode: ClientMode | str = ClientMode.AUTO,
        backend: Server | str = Server.FASTAPI,
        url: str | None = None,
        payload: Payload | str = Payload.JPEG,
        *,
        settings=None,
        engine: str | None = None,
        timeout: float = 60.0,
        retries: int = 4,
        retry_budget_s: float = 30.0,
        **backend_options,
    ):
        mode, payload = word(ClientMode, mode, "mode"), word(Payload, payload, "payload")
        self._made_with = dict(mode=mode, backend=backend, url=url, payload=payload, settings=settings, engine=engine,
                               timeout=timeout, retries=retries, retry_budget_s=retry_budget_s, **backend_options)
        self.mode, self.payload, self.backend_name = mode, payload, backend
        self.fallback_reason: str | None = None
        self._retrying = retrying(retries, retry_budget_s)
        self._backend: Backend
        if mode == ClientMode.LOCAL:
            self._backend = self._local(settings, engine)
        else:
            remote = make_remote_backend(backend, url, timeout, **backend_options)
            if mode == ClientMode.REMOTE or remote.ready():
                self._backend = remote
            else:
                remote.close()
                self.fallback_reason = f"{backend} at {getattr(remote, 'url', url)} is not ready"
                log.warning("servelab client: %s; running the model in-process instead", self.fallback_reason)
                self._backend = self._local(settings, engine)

    def another(self) -> InferenceClient:
        """A new client made with this one's arguments: one more worker's own connection to the same server."""
        return InferenceClient(**self._made_with)

    @staticmethod
    def _local(settings, engine):
        from servelab.client.local import LocalBackend

        return LocalBackend(settings, engine=engine)

    @property
    def mode_used(self) -> str:
        return "local" if self._backend.name == "local" else "remote"

    @property
    def weights(self) -> str:
        if not self._backend.weights:
            self._backend.ready()  # a remote backend learns the server's weights label from its readiness answer
        return self._backend.weights

    def info(self) -> dict:
        return {"mode": self.mode, "mode_used": self.mode_used, "payload": self.payload,
                "fallback_reason": self.fallback_reason, **self._backend.info()}

    # --- embedding -------------------------------------------------------------------------------
    def embed_images(self, images: Sequence) -> np.ndarray:
        """Images as file bytes, paths or PIL images -> L2-normalised float32 [N, 512]."""
        if len(images) == 0:
            return np.zeros((0, EMBED_DIM), dtype=np.float32)
        if self.payload == Payload.TENSOR:
            return self._retrying(self._backend.embed_tensor, preprocess_batch(list(images)))
        return self._retrying(self._backend.embed_encoded, [_as_bytes(im) for im in images])

    def embed_tensor(self, batch: np.ndarray) -> np.ndarray:
        return self._retrying(self._backend.embed_tensor, batch)

    def embed_paths(self, paths: Iterable, batch_size: int = 16, progress: bool = True) -> np.ndarray:
        from tqdm.auto import tqdm

        paths = list(paths)
        out = np.zeros((len(paths), EMBED_DIM), dtype=np.float32)
        bar = tqdm(total=len(paths), unit="img", desc="embedding", disable=not progress)
        for start in range(0, len(paths), batch_size):
            chunk = paths[start : start + batch_size]
            out[start : start + len(chunk)] = self.embed_images(chunk)
            bar.update(len(chunk))
        bar.close()
        return out

    def close(self) -> None:
        self._backend.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _as_bytes(item) -> bytes:
    if isinstance(item, (bytes, bytearray, memoryview)):
        return bytes(item)
    if isinstance(item, Image.Image):
        import io

        buf = io.BytesIO()
        item.save(buf, format="PNG")  # lossless, so remote and local see the same pixels
        return buf.getvalue()
    if isinstance(item, (str, os.PathLike, Path)):
        return Path(item).read_bytes()
    raise TypeError(f"cannot embed {type(item).__name__}; pass bytes, a path or a PIL image")
