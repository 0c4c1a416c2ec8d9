"""Worker factories: one request function per worker, for a client or an in-process engine.

    client_factory(make_client, blobs=… | tensor=…), embedder_factory(embedder, batch)
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from servelab.bench.load.options import Work
from servelab.errors import InvalidValue


def client_factory(make_client: Callable[[], object], *, blobs: list[bytes] | None = None,
                   tensor: np.ndarray | None = None) -> Callable[[int], tuple]:
    """Worker factory: each worker gets its own client from `make_client()` and sends the same request.

    `blobs` (encoded images) go through `embed_images`, a `tensor` [N,3,224,224] through `embed_tensor`.
    """
    if (blobs is None) == (tensor is None):
        raise InvalidValue("give exactly one of blobs= or tensor=")

    def factory(i: int):
        client = make_client()
        if tensor is not None:
            n = int(tensor.shape[0])

            def work():
                client.embed_tensor(tensor)
                return n
        else:
            n = len(blobs)

            def work():
                client.embed_images(blobs)
                return n
        return work, client.close

    return factory


def embedder_factory(embedder, batch: np.ndarray) -> Callable[[int], Work]:
    """Worker factory around one in-process engine (raw compute, no serving layer)."""
    n = int(batch.shape[0])

    def factory(i: int):
        def work():
            embedder.embed(batch)
            return n
        return work

    return factory
