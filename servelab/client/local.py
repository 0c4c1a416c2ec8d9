"""In-process backend: the engine runs inside the caller (mode `local`)."""

from __future__ import annotations

import numpy as np

from servelab.client.base import Backend
from servelab.config import Settings
from servelab.model.preprocess import preprocess_batch


class LocalBackend(Backend):
    name = "local"

    def __init__(self, settings: Settings | None = None, embedder=None, **engine_overrides):
        if embedder is None:
            from servelab.model.engines import make_embedder

            embedder = make_embedder(settings, **engine_overrides)
        self.embedder = embedder
        self.weights = embedder.weights

    def embed_encoded(self, blobs):
        return self.embedder.embed(preprocess_batch(blobs))

    def embed_tensor(self, batch: np.ndarray):
        return self.embedder.embed(batch)

    def info(self):
        return {"backend": self.name, **self.embedder.info()}
