"""The requests every benchmark sends: synthetic photo-like JPEGs and their preprocessed tensors (deterministic)."""

from __future__ import annotations

import json
from functools import lru_cache

import numpy as np


@lru_cache(maxsize=8)
def sample_jpegs(n: int, seed: int = 0, size: tuple[int, int] = (640, 480)) -> tuple[bytes, ...]:
    """n distinct synthetic photo-like JPEGs (generated, never downloaded)."""
    from servelab.data import encode, synthetic_photo

    return tuple(encode(synthetic_photo(seed + i, size)) for i in range(n))


@lru_cache(maxsize=8)
def sample_tensor(n: int, seed: int = 0) -> np.ndarray:
    """The preprocessed float32 [n, 3, 224, 224] batch of `sample_jpegs(n, seed)`."""
    from servelab.model.preprocess import preprocess_batch

    return preprocess_batch(list(sample_jpegs(n, seed)))


def payload_bytes(payload: str, batch: int) -> int:
    """Bytes of payload the client puts in one request (before protocol framing)."""
    if payload == "tensor":
        return int(sample_tensor(batch).nbytes)
    if payload == "json-lists":
        return len(json.dumps(sample_tensor(batch).ravel().tolist()))
    return int(sum(len(b) for b in sample_jpegs(batch)))
