"""JPEG decoding and preprocessing on the engine's device (nvJPEG through torchvision), beside the PIL + numpy path.

    pixels = preprocess_jpegs(jpegs, device="cuda")   # torch float32 [N, 3, 224, 224], on the GPU
    embeddings = module(pixels)                       # the torch engine's module, same device

At hundreds of images per second the CPU's decode becomes the served bottleneck long before the GPU's model
does; `torchvision.io.decode_jpeg` decodes the whole list in one batched nvJPEG call on the device (on device
'cpu', libjpeg-turbo in torchvision's image extension). The transform is the one of `servelab.model.preprocess`
(shortest side to 224, bicubic, centre crop, CLIP mean/std) with torch's antialiased bicubic in place of PIL's:
close, not bit-identical, so parity with the CPU path is judged on embeddings (cosine >= 0.999, tests/gpu).
Differences from the CPU path, by design of nvJPEG: EXIF orientation is not applied, and only JPEG is accepted;
the service sends PNG, WebP and every JPEG the device would read differently (rotated by EXIF, CMYK, progressive)
to the CPU path (servelab.service.codecs.device_jpegs).

The steps are separate so that each can be used alone: `decode_jpegs` (bytes -> uint8 [3, H, W] per image, one
batched call), `pixels_into` (those images resized, cropped and normalised into rows of a batch already on the
device, one batched resize per group of images of the same size) and `normalise_into` (uint8 crops -> the
model's input, on the device: what the service does with an X-Dtype uint8 tensor on a GPU).
"""

from __future__ import annotations

from dataclasses import dataclass

from servelab.model.contract import IMAGE_SIZE
from servelab.model.preprocess import MEAN, STD, crop_offsets, resized_size


@dataclass(frozen=True)
class JpegImages:
    """One request's JPEG files, handed to the engine to decode on its device (the micro-batcher counts its
    images with len(), as it counts an array's rows)."""

    blobs: tuple[bytes, ...]

    def __len__(self) -> int:
        return len(self.blobs)


# what the device decoder (torchvision's decode_jpeg) reads as the CPU path does: EXIF rotation is not applied
# there, and CMYK and progressive files are decoded differently or not at all by nvJPEG's batched path
DEVICE_JPEG_MODES = ("RGB", "L")
_ORIENTATION = 0x0112  # the EXIF tag


def device_decodable(blob: bytes, *, max_bytes: int, max_pixels: int) -> bool:
    """Whether the device decoder reads `blob` as the CPU path would: a baseline JPEG in RGB or greyscale, upright
    (no EXIF rotation), within the byte and pixel limits. Only the header is read, by PIL's JPEG parser alone (tens
    of microseconds). Anything else (PNG, WebP, a rotated, CMYK or progressive JPEG, an empty, oversized or
    unreadable file) is for the CPU path, which refuses what must be refused."""
    import io

    from PIL import Image

    if not blob or len(blob) > max_bytes:
        return False
    try:
        with Image.open(io.BytesIO(blob), formats=("JPEG",)) as img:
            w, h = img.size
            return (img.mode in DEVICE_JPEG_MODES and not img.info.get("progressive")
                    and not img.info.get("progression") and 0 < w * h <= max_pixels
                    and img.getexif().get(_ORIENTATION, 1) == 1)
    except Exception:  # not a JPEG, or a header PIL refuses (a decompression bomb)
        return False


def decoder_check(device: str, decoder=None) -> str | None:
    """Why `decoder` (torchvision's decode_jpeg: `decode_jpegs`) cannot run on `device` here (None: it can). It
    decodes one tiny JPEG."""
    try:
        (decoder or decode_jpegs)([_tiny_jpeg()], device=device)
    except Exception as exc:  # no torchvision, its image extension missing (a build for another torch), no nvJPEG
        return f"{type(exc).__name__}: {exc}"[:300]
    return None


def decode_jpegs(jpegs: list[bytes], device: str = "cuda") -> list:
    """JPEG bytes -> one uint8 [3, H, W] tensor per image on `device`, in one batched torchvision call (nvJPEG on
    a GPU). A bad image fails the whole call (RuntimeError): the caller decodes one by one to find it."""
    import torch

    from servelab.model.torch_compat import ensure_torchvision_importable

    ensure_torchvision_importable()
    from torchvision.io import ImageReadMode, decode_jpeg

    data = [torch.frombuffer(bytearray(b), dtype=torch.uint8) for b in jpegs]
    images = decode_jpeg(data, mode=ImageReadMode.RGB, device=device)
    return list(images) if isinstance(images, (list, tuple)) else [images]


def _scale_offset(device, dtype):
    """(pixel × scale − offset) = (pixel / 255 − mean) / std, as [3, 1, 1] tensors of `dtype` on `device`."""
    import torch

    std = torch.tensor(STD, dtype=torch.float32, device=device).view(3, 1, 1)
    mean = torch.tensor(MEAN, dtype=torch.float32, device=device).view(3, 1, 1)
    return (1.0 / (255.0 * std)).to(dtype), (mean / std).to(dtype)


def normalise_into(pixels, out) -> None:
    """uint8 (or 0-255 float) crops [N, 3, 224, 224] -> `out` (any float dtype, same device): the model's input,
    in float32 arithmetic whatever `out`'s dtype (a half-precision engine gets the float32 result, rounded)."""
    import torch

    scale, offset = _scale_offset(pixels.device, torch.float32)
    out.copy_(pixels.to(torch.float32).mul_(scale).sub_(offset))


def pixels_into(images: list, out) -> None:
    """Decoded uint8 [3, H, W] images -> `out` [len(images), 3, 224, 224] (on their device): shortest side to 224
    (bicubic, antialiased, rounded to 8 bits as PIL's resize is), centre crop, normalised. Images of the same size
    are resized together, in one call."""
    import torch
    import torch.nn.functional as F

    groups: dict[tuple[int, int], list[int]] = {}
    for i, img in enumerate(images):
        groups.setdefault((int(img.shape[1]), int(img.shape[2])), []).append(i)
    for (h, w), rows in groups.items():
        x = torch.stack([images[i] for i in rows]).float()
        new_w, new_h = resized_size(w, h)
        if (new_w, new_h) != (w, h):
            # PIL resizes 8-bit pixels and rounds: the same here, so both paths crop the same values
            x = F.interpolate(x, size=(new_h, new_w), mode="bicubic", align_corners=False, antialias=True)
            x = x.round_().clamp_(0, 255)
        left, top = crop_offsets(new_w, new_h)
        crops = x[:, :, top : top + IMAGE_SIZE, left : left + IMAGE_SIZE]
        if rows == list(range(rows[0], rows[0] + len(rows))):  # consecutive rows: written in place
            normalise_into(crops, out[rows[0] : rows[0] + len(rows)])
        else:
            done = torch.empty(crops.shape, dtype=out.dtype, device=out.device)
            normalise_into(crops, done)
            out[torch.tensor(rows, device=out.device)] = done


def preprocess_jpegs(jpegs: list[bytes], device: str = "cuda", decoder=decode_jpegs):
    """JPEG bytes -> float32 [N, 3, 224, 224] on `device`, decoded there in one batched call."""
    import torch

    out = torch.empty((len(jpegs), 3, IMAGE_SIZE, IMAGE_SIZE), dtype=torch.float32, device=device)
    if jpegs:
        pixels_into(decoder(jpegs, device=device), out)
    return out


def _tiny_jpeg() -> bytes:
    """An 8x8 baseline JPEG (what decoder_check decodes)."""
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (8, 8), (128, 64, 32)).save(buf, format="JPEG")
    return buf.getvalue()
