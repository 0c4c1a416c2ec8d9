"""Synthetic photo-like images, generated (never downloaded) for tests, benchmarks and the dedup quality set."""

from __future__ import annotations

import io

import numpy as np
from PIL import Image, ImageDraw, ImageFilter


def synthetic_photo(seed: int, size: tuple[int, int] = (640, 480)) -> Image.Image:
    """A distinct RGB 'photo' per seed: a colour gradient sky, shapes, texture, mild blur."""
    rng = np.random.default_rng(seed)
    w, h = size
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    c0, c1 = rng.uniform(0, 255, 3), rng.uniform(0, 255, 3)
    t = ((xx * rng.uniform(-1, 1) + yy * rng.uniform(-1, 1)) / (w + h) + 1) / 2
    arr = c0 * t[..., None] + c1 * (1 - t[..., None])
    arr += rng.normal(0, 6, arr.shape)
    img = Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8), "RGB")
    draw = ImageDraw.Draw(img)
    for _ in range(int(rng.integers(4, 10))):
        x0, y0 = rng.uniform(0, w), rng.uniform(0, h)
        x1, y1 = x0 + rng.uniform(20, w / 2), y0 + rng.uniform(20, h / 2)
        color = tuple(int(v) for v in rng.uniform(0, 255, 3))
        if rng.random() < 0.5:
            draw.ellipse([x0, y0, x1, y1], fill=color)
        else:
            draw.rectangle([x0, y0, x1, y1], fill=color)
    return img.filter(ImageFilter.GaussianBlur(radius=1.0))


def encode(img: Image.Image, fmt: str = "JPEG", **kwargs) -> bytes:
    buf = io.BytesIO()
    if fmt.upper() == "JPEG" and img.mode not in ("RGB", "L", "CMYK"):
        img = img.convert("RGB")
    img.save(buf, format=fmt, **({"quality": 90} if fmt.upper() == "JPEG" and not kwargs else kwargs))
    return buf.getvalue()
