"""Build the OpenCLIP ViT-B/32 image tower with the weights the settings ask for.

Real loading path first: an open_clip pretrained tag (SERVELAB_PRETRAINED, needs internet) or a local
checkpoint (SERVELAB_CHECKPOINT). Without either, a deterministic random-init model (fixed seed, identical in
every process) with the same compute and shapes; every output carries its label so nobody mistakes its
embeddings for CLIP's.
"""

from __future__ import annotations

from pathlib import Path

from servelab.config import Settings
from servelab.fileio import file_digest


def weights_label(settings: Settings) -> str:
    if settings.pretrained:
        return f"pretrained ({settings.pretrained})"
    if settings.checkpoint:
        return f"checkpoint ({Path(settings.checkpoint).name}, sha256 {file_digest(settings.checkpoint)[:12]})"
    return f"random-init (seed {settings.seed})"


def is_random_init(label: str) -> bool:
    return label.startswith("random-init")
