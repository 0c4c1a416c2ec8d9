"""Photo-finder fixtures: a generated folder with known duplicate groups, and the local embedding client."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from servelab.data import encode, synthetic_photo

# Settings under which the known groups below are exactly what the finder must report: the pHash check
# keeps the test independent of how good (or random) the embedding weights are.
THRESHOLD = 0.90
PHASH_MAX = 10


def make_known_set(root: Path) -> dict:
    """Write photos with known groups under `root`; returns {"near": [...], "exact": [...], "singles": [...]}."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "copies").mkdir()
    (root / "deep" / "x").mkdir(parents=True)
    a, b, c, d = (synthetic_photo(s, (320, 240)) for s in (101, 102, 103, 104))
    a_jpg = encode(a)
    (root / "a.jpg").write_bytes(a_jpg)
    (root / "copies" / "a_copy.jpg").write_bytes(a_jpg)
    a.resize((192, 144), Image.LANCZOS).save(root / "a_resized.png")
    (root / "b.jpg").write_bytes(encode(b))
    (root / "b_q40.jpg").write_bytes(encode(b, "JPEG", quality=40))
    (root / "c.jpg").write_bytes(encode(c))
    c.save(root / "deep" / "x" / "c.webp", quality=90)
    d_jpg = encode(d)
    (root / "d.jpg").write_bytes(d_jpg)
    (root / "deep" / "d_copy.jpg").write_bytes(d_jpg)
    for i, s in enumerate((201, 202, 203)):
        (root / f"single_{i}.jpg").write_bytes(encode(synthetic_photo(s, (300, 300))))
    # upright 200x300 photo stored sideways with EXIF orientation 6 and a capture date
    e = synthetic_photo(204, (300, 200))
    exif = Image.Exif()
    exif[0x0112] = 6
    exif.get_ifd(0x8769)[0x9003] = "2021:07:04 10:30:00"
    e.save(root / "rotated.jpg", exif=exif.tobytes(), quality=90)
    return {
        "near": [{"a.jpg", "copies/a_copy.jpg", "a_resized.png"}, {"b.jpg", "b_q40.jpg"}, {"c.jpg", "deep/x/c.webp"}],
        "exact": [{"d.jpg", "deep/d_copy.jpg"}],
        "singles": {"single_0.jpg", "single_1.jpg", "single_2.jpg", "rotated.jpg"},
    }


@pytest.fixture(scope="session")
def dedup_client(onnx_meta):
    from servelab.client import InferenceClient

    with InferenceClient(mode="local", engine="onnx") as client:
        yield client


@pytest.fixture
def known_set(tmp_path):
    root = tmp_path / "photos"
    return root, make_known_set(root)


def cli(*args, check=True, **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "servelab.cli", "dedup", *map(str, args)], capture_output=True,
                          text=True, timeout=120, **kw)
    if check and proc.returncode != 0:
        raise AssertionError(f"servelab dedup {' '.join(map(str, args))} failed ({proc.returncode}):\n{proc.stderr}")
    return proc
