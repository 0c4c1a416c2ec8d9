"""Request codecs: how each accepted body becomes encoded images or a ready tensor.

Each is a small function of the bytes (and headers) it needs, so it can be tested without a server; a bad
body is refused through `reject` with a 4xx naming the problem. Decoding the images themselves
(`decode_images`) is CPU work: the service runs it in its bounded decode pool, never on the event loop; or, with
the decode on the engine's device, `device_jpegs` reads the files' headers and the engine decodes them there. Only
JPEG, PNG and WebP reach a decoder (`check_format`): PIL reads many more formats, and each is one more parser
facing the bytes of anyone who can reach the service.

    multipart   multipart/form-data, one image per file part (any field name)   -> list of image bytes
    raw         one image/jpeg|png|webp body                                    -> [image bytes]
    base64      JSON {"images": ["<base64>", ...]} (data: URLs accepted)        -> list of image bytes
    tensor      little-endian float32 NCHW bytes; X-Shape: N,3,224,224            -> float32 array
                or uint8 pixels (X-Dtype: uint8; resized and cropped, not normalised) -> uint8 array, normalised
                into the batch on the engine's thread (`into_batch`): a quarter of the bytes
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import NoReturn

import numpy as np
from PIL import Image, UnidentifiedImageError
from starlette.requests import Request

from servelab.model.contract import DTYPE, INPUT_SHAPE, PIXEL_DTYPE, TENSOR_DTYPES
from servelab.model.gpu_decode import JpegImages, device_decodable
from servelab.model.preprocess import ImageDecodeError, image_error, normalise, preprocess_bytes
from servelab.service.errors import ApiError, reject

IMAGE_TYPES = frozenset({"image/jpeg", "image/jpg", "image/png", "image/webp"})
MULTIPART_TYPE = "multipart/form-data"
BINARY_TYPE = "application/octet-stream"
_DECODE_STATUS = {"too_large": 413, "too_many_pixels": 413}
IMAGE_FORMATS = ("JPEG", "PNG", "WEBP")  # PIL's names of the formats the service decodes
FORMATS_TEXT = "JPEG, PNG or WebP"


@dataclass(frozen=True)
class Limits:
    """What one request may carry (from Settings: max_images_per_request, max_bytes, max_pixels)."""

    max_images: int = 32
    max_bytes: int = 20 * 1024 * 1024
    max_pixels: int = 40_000_000

    @classmethod
    def from_settings(cls, settings) -> Limits:
        return cls(settings.max_images_per_request, settings.max_bytes, settings.max_pixels)


def media_type(content_type: str | None) -> str:
    """`image/JPEG; charset=x` -> `image/jpeg`; missing -> ''."""
    return (content_type or "").split(";")[0].strip().lower()


def check_count(n: int, limits: Limits) -> None:
    if n == 0:
        reject(400, "empty", "no images in request")
    if n > limits.max_images:
        reject(413, "too_many_images", f"{n} images in one request; the maximum is {limits.max_images}")


async def multipart_images(request: Request, limits: Limits) -> list[bytes]:
    """Every file part of a multipart/form-data body, in order."""
    try:
        form = await request.form(max_files=limits.max_images + 1, max_part_size=limits.max_bytes + 1)
    except ApiError:  # the body's own limits (size, time) refused it while it was read
        raise
    except Exception as exc:
        if "too many files" in str(exc).lower():  # the parser stops counting at max_files
            reject(413, "too_many_images", f"more than {limits.max_images} images in one request; "
                                           f"the maximum is {limits.max_images}")
        reject(400, "bad_multipart", f"could not parse multipart body: {exc}")
    files = [v for _, v in form.multi_items() if hasattr(v, "read")]
    if not files:
        reject(400, "empty", "multipart body has no file parts")
    check_count(len(files), limits)
    return [await f.read() for f in files]


def raw_image(body: bytes) -> list[bytes]:
    """A body that is one image file."""
    if not body:
        reject(400, "empty", "empty body: send image bytes")
    return [body]


def base64_images(body: bytes, limits: Limits) -> list[bytes]:
    """JSON {"images": ["<base64>", ...]} -> the decoded image files."""
    if not body:
        reject(400, "empty", 'empty body: send JSON {"images": ["<base64>", ...]}')
    try:
        doc = json.loads(body)
    except ValueError as exc:
        reject(400, "bad_json", f"body is not valid JSON: {exc}")
    images = doc.get("images") if isinstance(doc, dict) else None
    if not isinstance(images, list) or not all(isinstance(s, str) for s in images):
        reject(422, "bad_schema", 'expected JSON {"images": ["<base64>", ...]} (a list of base64 strings)')
    check_count(len(images), limits)
    blobs = []
    for i, text in enumerate(images):
        if text.startswith("data:") and "," in text:
            text = text.split(",", 1)[1]
        try:
            blobs.append(base64.b64decode(text, validate=True))
        except (binascii.Error, ValueError):
            reject(400, "bad_base64", f"image {i}: malformed base64")
    return blobs


def tensor_shape(content_type: str | None, shape_header: str | None, dtype_header: str | None,
                 limits: Limits) -> tuple[int, int, int, int]:
    """Check a tensor request's headers (before its body is read): the [N, 3, 224, 224] shape it announces, in one
    of the dtypes the service takes (`tensor_dtype`)."""
    ctype = media_type(content_type)
    if ctype != BINARY_TYPE:
        reject(415, "unsupported_media_type", f"content type {ctype or '(none)'!r}; send {BINARY_TYPE}")
    tensor_dtype(dtype_header)
    if not shape_header:
        reject(400, "missing_shape", "header X-Shape (e.g. 4,3,224,224) is required")
    try:
        shape = tuple(int(x) for x in shape_header.split(","))
    except ValueError:
        reject(400, "bad_shape", f"X-Shape {shape_header!r} is not a comma-separated list of integers")
    if len(shape) != 4 or shape[1:] != INPUT_SHAPE or shape[0] < 0:
        reject(400, "bad_shape", f"shape {list(shape)} must be [N, 3, 224, 224]")
    check_count(shape[0], limits)
    return shape  # type: ignore[return-value]


def tensor_dtype(dtype_header: str | None) -> str:
    """X-Dtype: float32 (the default: normalised values) or uint8 (pixels, normalised by the service)."""
    dtype = (dtype_header or DTYPE).strip().lower()
    if dtype not in TENSOR_DTYPES:
        reject(400, "bad_dtype", f"dtype {dtype!r} not supported; send {' or '.join(TENSOR_DTYPES)}")
    return dtype


def tensor_nbytes(shape: tuple[int, ...], dtype: str = DTYPE) -> int:
    return math.prod(shape) * (4 if dtype == DTYPE else 1)


def tensor_from_bytes(body: bytes | bytearray | memoryview | np.ndarray, shape: tuple[int, ...],
                      dtype: str = DTYPE) -> np.ndarray:
    """Raw little-endian bytes of `shape` -> a writable array of `dtype` over those bytes (copied only when they are
    read-only, as a `bytes` object is); a float32 tensor must be finite. uint8 pixels are any values 0-255."""
    check_byte_count(body.nbytes if isinstance(body, (np.ndarray, memoryview)) else len(body), shape, dtype)
    array = np.frombuffer(body, dtype="<f4" if dtype == DTYPE else np.uint8)
    if not array.flags.writeable:
        array = array.copy()
    array = array.reshape(shape)
    if dtype == DTYPE and not finite(array):
        reject(400, "non_finite", "tensor contains NaN or infinity")
    return array


def check_byte_count(size: int, shape: tuple[int, ...], dtype: str = DTYPE) -> None:
    expected = tensor_nbytes(shape, dtype)
    if size != expected:
        reject(400, "bad_byte_count", f"{size} bytes received; shape {list(shape)} {dtype} needs {expected}")


def finite(array: np.ndarray) -> bool:
    """Whether every value is finite, without a boolean copy of the array: its largest and smallest values are
    finite only if every value is (NaN propagates through both; an infinity is one of them)."""
    flat = array.reshape(-1)
    return bool(np.isfinite(np.maximum.reduce(flat)) and np.isfinite(np.minimum.reduce(flat))) if flat.size else True


def into_batch(request: np.ndarray, rows: np.ndarray) -> None:
    """Write one request's array into its rows of a float32 batch (the micro-batcher's `into`, on the engine's
    thread): uint8 pixels are normalised on the way, as the service's own decoding does; float32 is copied."""
    if request.dtype == PIXEL_DTYPE:
        normalise(request, out=rows)
    else:
        np.copyto(rows, request)


def check_format(blob: bytes, i: int) -> None:
    """Refuse image `i` unless it is JPEG, PNG or WebP, reading only its header, and only with those formats' parsers.

    Another format recognised by its first bytes is 415; bytes no format claims are 400 `not_an_image`; a JPEG,
    PNG or WebP whose header is damaged is 400 `corrupt`. Anything else about an allowed image (its size, its
    pixels) is for decoding to judge."""
    if not blob:
        return  # decoding says it is empty
    try:
        with Image.open(io.BytesIO(blob), formats=IMAGE_FORMATS):
            return
    except UnidentifiedImageError:
        pass
    except Exception:  # an allowed format whose header says something wrong: decoding names it
        return
    named = _format_by_signature(blob)
    if named in IMAGE_FORMATS:
        reject(400, "corrupt", f"image {i}: {named} data is corrupt or truncated")
    if named:
        reject(415, "unsupported_image_format", f"image {i} looks like {named}; the service takes {FORMATS_TEXT} images")
    reject(400, "not_an_image", f"image {i}: bytes are not a recognised image (expected {FORMATS_TEXT})")


def _format_by_signature(blob: bytes) -> str | None:
    """The format whose signature the first 16 bytes carry, by PIL's own checks (no parser runs), or None."""
    Image.init()
    prefix = blob[:16]
    for name, (_, accept) in Image.OPEN.items():
        try:
            if accept is not None and accept(prefix):
                return name
        except Exception:  # a check that cannot read so short a prefix does not claim it
            continue
    return None


def decode_images(blobs: list[bytes], limits: Limits, before_each: Callable[[], object] = lambda: None
                  ) -> np.ndarray:
    """Image files -> preprocessed float32 [N, 3, 224, 224] (CPU work: run it in the decode pool).

    Every image's format is checked before the first is decoded; `before_each()` runs before each decode and
    may refuse the rest (the request's deadline)."""
    for i, blob in enumerate(blobs):
        if len(blob) <= limits.max_bytes:  # a larger one is refused for its size, unread
            check_format(blob, i)
    out = np.empty((len(blobs), *INPUT_SHAPE), dtype=np.float32)
    for i, blob in enumerate(blobs):
        before_each()
        try:
            out[i] = preprocess_bytes(blob, max_bytes=limits.max_bytes, max_pixels=limits.max_pixels)
        except ImageDecodeError as exc:
            refuse_image(image_error(i, exc))
    return out


def refuse_image(exc: ImageDecodeError) -> NoReturn:
    """Refuse a request for an image that did not decode (`image_error`'s words, from the decode pool or from the
    engine's device): 413 for one over the size or pixel limits, else 400."""
    reject(_DECODE_STATUS.get(exc.kind, 400), exc.kind, str(exc))



def device_jpegs(blobs: list[bytes], limits: Limits) -> JpegImages | None:
    """A request's files for the engine to decode on its device, or None when one of them takes the CPU path.

    Only the headers are read (servelab.model.gpu_decode.device_decodable, tens of microseconds per file, so on the
    event loop). One file the device would read otherwise (PNG, WebP, a rotated, CMYK or progressive JPEG, one the
    limits refuse) sends the whole request to the CPU path (`decode_images`), which refuses what must be refused
    with its own 4xx. A file whose header reads well and whose data is corrupt is found by the engine, which refuses
    that request alone."""
    if all(device_decodable(b, max_bytes=limits.max_bytes, max_pixels=limits.max_pixels) for b in blobs):
        return JpegImages(tuple(blobs))
    return None
