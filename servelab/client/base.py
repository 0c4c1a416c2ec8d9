"""What every backend provides: encoded images or a ready tensor in, embeddings out."""

from __future__ import annotations

import numpy as np


class Backend:
    name = "base"
    weights = ""

    def embed_encoded(self, blobs: list[bytes]) -> np.ndarray:
        """JPEG/PNG/WebP file bytes -> [N, 512]; the far side decodes and preprocesses."""
        raise NotImplementedError

    def embed_tensor(self, batch: np.ndarray) -> np.ndarray:
        """Preprocessed float32 [N, 3, 224, 224] -> [N, 512]."""
        raise NotImplementedError

    def ready(self) -> bool:
        return True

    def info(self) -> dict:
        return {"backend": self.name, "weights": self.weights}

    def close(self) -> None:
        pass
