"""The torch side of the model: build the visual tower with L2 normalisation (imports torch)."""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path

import torch
import torch.nn.functional as F

from servelab.config import Settings
from servelab.model.weights import weights_label


class NormalizedImageEncoder(torch.nn.Module):
    """The visual tower plus L2 normalisation, so every engine (and Triton) returns unit vectors."""

    def __init__(self, visual):
        super().__init__()
        self.visual = visual

    def forward(self, pixel_values):
        return F.normalize(self.visual(pixel_values), dim=-1)


def build_image_encoder(settings: Settings | None = None):
    """Return (module mapping [N,3,224,224] -> L2-normalised [N,512], weights label)."""
    from servelab.model.torch_compat import ensure_torchvision_importable

    settings = settings or Settings.from_env()
    ensure_torchvision_importable()
    import open_clip

    label = weights_label(settings)
    if settings.checkpoint and not Path(settings.checkpoint).is_file():
        raise FileNotFoundError(f"SERVELAB_CHECKPOINT={settings.checkpoint} does not exist")
    pretrained = settings.pretrained or settings.checkpoint or None
    # A local RNG state for init, so building the model never disturbs the caller's torch RNG.
    quiet = _no_random_init_warning() if pretrained is None else contextlib.nullcontext()
    with torch.random.fork_rng(devices=[]), quiet:
        torch.manual_seed(settings.seed)
        model = open_clip.create_model(settings.model_name, pretrained=pretrained, device="cpu")
    encoder = NormalizedImageEncoder(model.visual).eval()
    for p in encoder.parameters():
        p.requires_grad_(False)
    return encoder, label


class _RandomInitWarning(logging.Filter):
    """Drops open_clip's "No pretrained weights loaded … Model initialized randomly" (logged on the root logger)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("No pretrained weights loaded")


@contextlib.contextmanager
def _no_random_init_warning():
    """While the random-init model is built on purpose: its label (weights_label) already says so."""
    root, quiet = logging.getLogger(), _RandomInitWarning()
    root.addFilter(quiet)
    try:
        yield
    finally:
        root.removeFilter(quiet)
