"""One preprocessing implementation for every path (client, service, Triton python model).

PIL + numpy only, so the service and Triton need not import torch. The transform is open_clip's for ViT-B/32:
resize the shortest side to 224 (bicubic), center crop 224, scale to [0, 1], normalise with CLIP's mean/std,
CHW float32. Before it, `decode_image` turns whatever the file is into an upright RGB picture: EXIF
orientation applied, transparency composited on white, palette / grayscale / CMYK converted. open_clip itself
would drop alpha *after* resizing; compositing first is the sensible choice for photos with transparency,
and for plain RGB input the two are identical (a test checks max abs diff <= 1e-5).

`preprocess_bytes` decodes a large JPEG at reduced scale: libjpeg can return 1/2, 1/4 or 1/8 of each side
straight from the DCT (Pillow's `draft`), which skips most of the decoding and resizing work (a 12-megapixel
phone photo decodes about ten times faster). The scale is chosen so that both sides stay at least 224, so the
resize still only shrinks; the embedding stays at cosine >= 0.999 against a full decode (a test checks a lab
photo and a 4000x3000 one). Every path (client, service, Triton's python model) calls `preprocess_bytes`, so
they all agree; `decode_image` alone decodes in full unless asked.
"""

from __future__ import annotations

import io
import warnings

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from servelab.errors import InvalidValue, ServelabError
from servelab.model.contract import IMAGE_SIZE, INPUT_SHAPE

MEAN = np.array([0.48145466, 0.4578275, 0.40821073], dtype=np.float32)
STD = np.array([0.26862954, 0.26130258, 0.27577711], dtype=np.float32)
# the normalisation folded into one scale and one offset per channel: a fifth of the time of dividing by 255,
# subtracting the mean and dividing by the std in turn, each a pass over the image (about 0.5 ms per image)
_SCALE = (1.0 / (255.0 * STD)).reshape(3, 1, 1)
_OFFSET = (MEAN / STD).reshape(3, 1, 1)

DEFAULT_MAX_BYTES = 20 * 1024 * 1024
DEFAULT_MAX_PIXELS = 40_000_000


class ImageDecodeError(ServelabError, ValueError):
    """The bytes are not a usable image; the message says why (shown to API users)."""

    def __init__(self, message: str, kind: str = "invalid_image"):
        super().__init__(message)
        self.kind = kind


def image_error(i: int, exc: ImageDecodeError) -> ImageDecodeError:
    """Image `i` of a request refused for `exc`: the words every path that decodes a request's files answers with
    (the service's decode pool and the engine's device decoder alike), so a file is refused the same way wherever
    it was decoded."""
    return ImageDecodeError(f"image {i}: {exc}", exc.kind)


def decode_image(data: bytes, *, max_bytes: int = DEFAULT_MAX_BYTES, max_pixels: int = DEFAULT_MAX_PIXELS,
                 reduce_to: int | None = None) -> Image.Image:
    """Bytes -> upright RGB PIL image, with size and pixel limits checked before full decoding.

    `reduce_to=N`: a JPEG may be decoded at 1/2, 1/4 or 1/8 scale in the DCT, as far as both sides stay >= N
    pixels (the limits apply to the full size). Other formats, and JPEGs under 2N, decode in full."""
    if not data:
        raise ImageDecodeError("empty image: 0 bytes received", "empty")
    if len(data) > max_bytes:
        raise ImageDecodeError(f"image is {len(data)} bytes, over the limit of {max_bytes} bytes", "too_large")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        try:
            img = Image.open(io.BytesIO(data))
        except UnidentifiedImageError:
            raise ImageDecodeError("bytes are not a recognised image (expected JPEG, PNG or WebP)", "not_an_image") from None
        except Image.DecompressionBombError as exc:
            raise ImageDecodeError(f"image has too many pixels (decompression bomb guard): {exc}", "too_many_pixels") from None
        except (OSError, SyntaxError, ValueError) as exc:  # e.g. a header cut short: "Truncated File Read"
            raise ImageDecodeError(f"image data is corrupt or truncated: {exc}", "corrupt") from None
        w, h = img.size
        if w * h > max_pixels:
            raise ImageDecodeError(f"image is {w}x{h} = {w * h} pixels, over the limit of {max_pixels}", "too_many_pixels")
        if w < 1 or h < 1:
            raise ImageDecodeError(f"image has no pixels ({w}x{h})", "invalid_image")
        if reduce_to and img.format == "JPEG":
            img.draft("RGB", (reduce_to, reduce_to))  # only sets the scale: the decoding happens in load()
        try:
            img.load()
        except (OSError, SyntaxError, ValueError) as exc:
            raise ImageDecodeError(f"image data is corrupt or truncated: {exc}", "corrupt") from None
        except Image.DecompressionBombError as exc:
            raise ImageDecodeError(f"image has too many pixels: {exc}", "too_many_pixels") from None
    return to_rgb(img)


def to_rgb(img: Image.Image) -> Image.Image:
    """Apply EXIF orientation and convert any mode to RGB (transparency composited on white)."""
    try:
        img = ImageOps.exif_transpose(img)
    except Exception:  # a broken EXIF block must not lose the photo
        pass
    if img.mode == "P":
        img = img.convert("RGBA" if "transparency" in img.info else "RGB")
    if img.mode in ("RGBA", "LA", "RGBa", "La", "PA"):
        rgba = img.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(background, rgba).convert("RGB")
    if img.mode in ("I;16", "I;16B", "I;16L", "I"):
        arr = np.asarray(img, dtype=np.float64)
        hi = arr.max() or 1.0
        img = Image.fromarray((arr / hi * 255.0).round().astype(np.uint8), mode="L")
    if img.mode != "RGB":
        img = img.convert("RGB")  # L, 1, CMYK, YCbCr, F ...
    return img


def resized_size(width: int, height: int) -> tuple[int, int]:
    """torchvision Resize(224) on a PIL image: shortest side -> 224, long side truncated. (new_w, new_h)"""
    if width <= height:
        return IMAGE_SIZE, int(IMAGE_SIZE * height / width)
    return int(IMAGE_SIZE * width / height), IMAGE_SIZE


def crop_offsets(new_w: int, new_h: int) -> tuple[int, int]:
    """torchvision CenterCrop's (left, top): offsets rounded half to even, as Python's round()."""
    return int(round((new_w - IMAGE_SIZE) / 2.0)), int(round((new_h - IMAGE_SIZE) / 2.0))


def pixels_pil(img: Image.Image) -> np.ndarray:
    """RGB PIL image -> its uint8 [3, 224, 224] crop (resized and cropped as open_clip does, not yet normalised):
    what a client sends as a uint8 tensor, a quarter of the float32 bytes."""
    if img.mode != "RGB":
        img = to_rgb(img)
    w, h = img.size
    new_w, new_h = resized_size(w, h)
    if (new_w, new_h) != (w, h):
        img = img.resize((new_w, new_h), Image.BICUBIC)
    left, top = crop_offsets(new_w, new_h)
    img = img.crop((left, top, left + IMAGE_SIZE, top + IMAGE_SIZE))
    return np.asarray(img).transpose(2, 0, 1)  # uint8 height × width × RGB -> channels first (a view, no copy)


def normalise(pixels: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """uint8 [..., 3, 224, 224] pixels -> float32, (pixel / 255 - mean) / std per channel, in one multiply and
    one subtract; into `out` (float32, same shape) when given, so a batch is filled without another copy."""
    out = np.multiply(pixels, _SCALE, out=out, dtype=np.float32) if out is not None \
        else np.multiply(pixels, _SCALE, order="C", dtype=np.float32)
    out -= _OFFSET
    return out


def preprocess_pil(img: Image.Image) -> np.ndarray:
    """RGB PIL image -> float32 [3, 224, 224], exactly open_clip's transform."""
    return normalise(pixels_pil(img))


def preprocess_bytes(data: bytes, **limits) -> np.ndarray:
    """Image file bytes -> float32 [3, 224, 224]; a large JPEG is decoded at reduced scale (see the module doc)."""
    return preprocess_pil(decode_image(data, reduce_to=IMAGE_SIZE, **limits))


def engine_batch(batch) -> np.ndarray:
    """What every engine takes: `batch` as a C-contiguous float32 [N, 3, 224, 224]; ValueError naming the shape
    it got otherwise, and for uint8 pixels, which are not yet normalised (cast as they are, they would give
    wrong embeddings without a word)."""
    if getattr(batch, "dtype", None) == np.uint8:
        raise InvalidValue("a uint8 batch is pixels, not the model's input: normalise it first "
                           "(servelab.model.preprocess.normalise)")
    batch = np.ascontiguousarray(batch, dtype=np.float32)
    if batch.ndim != 4 or tuple(batch.shape[1:]) != INPUT_SHAPE:
        raise InvalidValue(f"expected a float32 batch of shape [N, 3, 224, 224], got {list(batch.shape)}")
    return batch


def preprocess_batch(images, **limits) -> np.ndarray:
    """A list of bytes / PIL images / paths -> float32 [N, 3, 224, 224]."""
    out = np.empty((len(images), *INPUT_SHAPE), dtype=np.float32)
    for i, item in enumerate(images):
        if isinstance(item, Image.Image):
            out[i] = preprocess_pil(to_rgb(item))
        elif isinstance(item, (bytes, bytearray, memoryview)):
            out[i] = preprocess_bytes(bytes(item), **limits)
        else:  # path-like
            with open(item, "rb") as fh:
                out[i] = preprocess_bytes(fh.read(), **limits)
    return out
