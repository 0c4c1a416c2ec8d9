"""The `emulated` engine: an emulated accelerator behind the Embedder interface, for lessons about GPU serving.

    SERVELAB_ENGINE=emulated SERVELAB_DEVICE_PROFILE=vit-b32-h100 servelab serve
    emb = make_embedder(settings, engine="emulated")   # emb.embed(batch) waits t(B) on a shared device

Each batch occupies an emulated device (servelab.model.emulated_device) for the profile's t(B) without using
the CPU, so the serving layer around it (the batcher, Triton's instances, the network) behaves as it would in
front of a GPU. Its output is NOT CLIP's: a deterministic, L2-normalised 512-d vector made from a coarse
sample of the input tensor by a fixed random projection (equal inputs give equal vectors, nothing more). Its
engine and weights labels say "emulated <profile>", and deduplication refuses it.
"""

from __future__ import annotations

import functools

import numpy as np

from servelab.config import Settings
from servelab.model.contract import EMBED_DIM
from servelab.model.device_profile import DeviceProfile, profile
from servelab.model.emulated_device import EmulatedDevices
from servelab.model.preprocess import engine_batch
from servelab.vocabulary import Engine

_STRIDE = 28  # samples 3 × 8 × 8 pixels of a 224 × 224 image: cheap, and still different for different inputs


@functools.cache
def _projection(features: int) -> np.ndarray:
    return np.random.default_rng(0).standard_normal((features, EMBED_DIM)).astype(np.float32)


def stand_in_embedding(batch: np.ndarray) -> np.ndarray:
    """float32 [N, 3, 224, 224] -> a deterministic L2-normalised float32 [N, 512] (not an image embedding)."""
    sample = batch[:, :, ::_STRIDE, ::_STRIDE].reshape(batch.shape[0], -1).astype(np.float32)
    sample = np.concatenate([sample, np.ones((batch.shape[0], 1), np.float32)], axis=1)  # the 1: never a zero vector
    # einsum, not `@`: a matrix product goes to the BLAS, whose worker threads then spin for a while after each
    # call (OpenBLAS) and kept a whole core busy in a service that is meant to wait, not compute
    out = np.einsum("nf,fe->ne", sample, _projection(sample.shape[1]))
    return out / np.linalg.norm(out, axis=1, keepdims=True)


class EmulatedEmbedder:
    """Engine `emulated`: waits t(B) on a shared emulated device, returns stand_in_embedding(batch). The same
    interface as servelab.model.engines.Embedder (engines builds this one, so it does not import engines)."""

    engine = Engine.EMULATED
    threads = 0

    def __init__(self, settings: Settings, device: int | None = None):
        self.profile: DeviceProfile = profile(settings.device_profile, settings.emulated_devices or None)
        self.devices = EmulatedDevices(self.profile, settings.device_dir)
        self.device = device  # None: each batch goes to the least busy device
        self.weights = self.profile.label
        self.provider = self.profile.label  # in-process records name the device where others name cpu or cuda
        self.last_wait_s: float | None = None

    def embed(self, batch: np.ndarray) -> np.ndarray:
        batch = engine_batch(batch)
        if batch.shape[0] == 0:
            return np.zeros((0, EMBED_DIM), dtype=np.float32)
        with self.devices.occupied(batch.shape[0], self.device) as occupied:
            out = stand_in_embedding(batch)  # inside the device time, as a GPU's own work would be
        self.last_wait_s = occupied.waited_s
        return out

    def info(self) -> dict:
        return {"engine": self.engine, "provider": self.provider, "weights": self.weights, "threads": self.threads,
                "device": self.profile.label, "device_profile": self.profile.as_dict(),
                "device_dir": str(self.devices.folder)}
