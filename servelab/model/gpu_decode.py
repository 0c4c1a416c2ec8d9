"""JPEG decoding and preprocessing on the GPU (nvJPEG through torchvision), beside the PIL + numpy path.

    pixels = preprocess_jpegs(jpegs, device="cuda")   # torch float32 [N, 3, 224, 224], on the GPU
    embeddings = module(pixels)                       # the torch engine's module, same device

At hundreds of images per second the CPU's decode becomes the served bottleneck long before the GPU's model
does; `torchvision.io.decode_jpeg` decodes the whole list in one batched nvJPEG call on the device. The
transform is the one of `servelab.model.preprocess` (shortest side to 224, bicubic, centre crop, CLIP mean/std)
with torch's antialiased bicubic in place of PIL's: close, not bit-identical, so parity with the CPU path is
judged on embeddings (cosine >= 0.999, tests/gpu). Differences from the CPU path, by design of nvJPEG: EXIF
orientation is not applied, and only JPEG is accepted (PNG, WebP … stay on the CPU path).
"""

from __future__ import annotations

from servelab.model.contract import IMAGE_SIZE
from servelab.model.preprocess import MEAN, STD, crop_offsets, resized_size


def preprocess_jpegs(jpegs: list[bytes], device: str = "cuda"):
    """JPEG bytes -> float32 [N, 3, 224, 224] on `device`, decoded there in one batched call."""
    import torch
    import torch.nn.functional as F

    from servelab.model.torch_compat import ensure_torchvision_importable

    ensure_torchvision_importable()
    from torchvision.io import ImageReadMode, decode_jpeg

    if not jpegs:
        return torch.zeros((0, 3, IMAGE_SIZE, IMAGE_SIZE), dtype=torch.float32, device=device)
    data = [torch.frombuffer(bytearray(b), dtype=torch.uint8) for b in jpegs]
    images = decode_jpeg(data, mode=ImageReadMode.RGB, device=device)
    mean = torch.tensor(MEAN, device=device).view(3, 1, 1)
    std = torch.tensor(STD, device=device).view(3, 1, 1)
    out = torch.empty((len(images), 3, IMAGE_SIZE, IMAGE_SIZE), dtype=torch.float32, device=device)
    for i, img in enumerate(images):  # sizes differ per photo; the resize is per image, on the device
        _, h, w = img.shape
        new_w, new_h = resized_size(w, h)
        x = img.unsqueeze(0).float()
        if (new_w, new_h) != (w, h):
            # PIL resizes 8-bit pixels and rounds: the same here, so both paths crop the same values
            x = F.interpolate(x, size=(new_h, new_w), mode="bicubic", align_corners=False, antialias=True)
            x = x.round().clamp(0, 255)
        left, top = crop_offsets(new_w, new_h)
        x = x[0, :, top : top + IMAGE_SIZE, left : left + IMAGE_SIZE] / 255.0
        out[i] = (x - mean) / std
    return out
