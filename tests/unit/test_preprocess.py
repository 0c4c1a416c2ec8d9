"""Our PIL + numpy preprocessing equals open_clip's transform, and odd image kinds come out upright RGB."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from servelab.data import encode, synthetic_photo
from servelab.model.preprocess import ImageDecodeError, decode_image, preprocess_bytes, preprocess_pil
from tests.conftest import cosine


@pytest.fixture(scope="module")
def open_clip_transform():
    from servelab.model.torch_compat import ensure_torchvision_importable

    ensure_torchvision_importable()
    import open_clip

    return open_clip.image_transform(224, is_train=False)


@pytest.mark.parametrize("size", [(640, 480), (480, 640), (224, 224), (100, 80), (1024, 257), (333, 1000)])
def test_matches_open_clip_for_rgb(open_clip_transform, size):
    img = synthetic_photo(7, size)
    ours = preprocess_pil(img)
    ref = open_clip_transform(img).numpy()
    assert ours.shape == (3, 224, 224) and ours.dtype == np.float32
    assert np.abs(ours - ref).max() <= 1e-5


def _png(img: Image.Image) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


def test_grayscale_becomes_rgb(open_clip_transform):
    img = synthetic_photo(1).convert("L")
    decoded = decode_image(_png(img))
    assert decoded.mode == "RGB"
    out = preprocess_pil(decoded)
    assert np.allclose(out[0] * 0.26862954 + 0.48145466, out[1] * 0.26130258 + 0.4578275, atol=1e-5)
    assert np.abs(out - open_clip_transform(decoded).numpy()).max() <= 1e-5


def test_transparent_png_composited_on_white():
    img = Image.new("RGBA", (300, 300), (255, 0, 0, 0))  # fully transparent red
    decoded = decode_image(_png(img))
    assert decoded.mode == "RGB"
    assert decoded.getpixel((150, 150)) == (255, 255, 255)


def test_palette_png_with_and_without_transparency():
    base = synthetic_photo(2, (320, 240)).convert("P", palette=Image.ADAPTIVE, colors=64)
    assert decode_image(_png(base)).mode == "RGB"
    with_t = base.copy()
    with_t.info["transparency"] = 0
    decoded = decode_image(_png(with_t))
    assert decoded.mode == "RGB" and decoded.size == (320, 240)


def test_cmyk_jpeg():
    img = synthetic_photo(3).convert("CMYK")
    data = encode(img, "JPEG", quality=95)
    assert Image.open(io.BytesIO(data)).mode == "CMYK"
    decoded = decode_image(data)
    assert decoded.mode == "RGB"
    ref = np.asarray(synthetic_photo(3), dtype=np.float32)
    assert np.abs(np.asarray(decoded, dtype=np.float32) - ref).mean() < 12  # colours survive the round trip


def test_exif_rotation_applied():
    img = synthetic_photo(4, (640, 480))
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 CW on display
    buf = io.BytesIO()
    img.save(buf, format="JPEG", exif=exif.tobytes(), quality=95)
    decoded = decode_image(buf.getvalue())
    assert decoded.size == (480, 640)
    upright = img.transpose(Image.Transpose.ROTATE_270)
    assert np.abs(preprocess_pil(decoded) - preprocess_pil(upright)).mean() < 0.05


@pytest.mark.parametrize(
    "data, kind",
    [
        (b"", "empty"),
        (b"definitely not an image", "not_an_image"),
        (encode(synthetic_photo(5))[:2000], "corrupt"),
        (encode(synthetic_photo(5))[:300], "corrupt"),  # cut inside the header
        (encode(synthetic_photo(5), "PNG")[:100], "corrupt"),
    ],
)
def test_bad_bytes_raise_named_errors(data, kind):
    with pytest.raises(ImageDecodeError) as err:
        preprocess_bytes(data)
    assert err.value.kind == kind


def test_limits():
    data = encode(synthetic_photo(6, (1000, 1000)))
    with pytest.raises(ImageDecodeError) as err:
        decode_image(data, max_bytes=100)
    assert err.value.kind == "too_large"
    with pytest.raises(ImageDecodeError) as err:
        decode_image(data, max_pixels=999_999)
    assert err.value.kind == "too_many_pixels"


def _grace_hopper() -> bytes | None:
    """A real photo that ships with matplotlib (512x600 JPEG), the lab's one non-synthetic picture."""
    try:
        import matplotlib.cbook as cbook

        with cbook.get_sample_data("grace_hopper.jpg") as fh:
            return fh.read()
    except Exception:
        return None


# each case's JPEG is made when its test runs, not when the suite is collected (the phone-sized ones take seconds)
REDUCED_DECODE_CASES = [
    pytest.param(lambda: encode(synthetic_photo(0)), 2, id="lab-photo-640x480"),
    pytest.param(lambda: encode(synthetic_photo(11, (4000, 3000))), 8, id="phone-4000x3000"),
    pytest.param(lambda: encode(synthetic_photo(12, (3024, 4032)), quality=95), 8, id="phone-portrait-3024x4032"),
    pytest.param(_grace_hopper, 2, id="real-photo-512x600"),
]


@pytest.mark.parametrize("make, scale", REDUCED_DECODE_CASES)
def test_reduced_jpeg_decode_keeps_the_embedding(make, scale, local_embedder):
    """preprocess_bytes decodes a large JPEG at 1/scale in the DCT; the embedding stays at cosine >= 0.999 of the
    full decode's."""
    data = make()
    if data is None:
        pytest.skip("matplotlib's sample photo is not installed here")
    full = decode_image(data)
    reduced = decode_image(data, reduce_to=224)
    assert reduced.size == tuple(-(-side // scale) for side in full.size)  # the scale libjpeg was asked for
    assert min(reduced.size) >= 224
    tensors = np.stack([preprocess_pil(full), preprocess_bytes(data)])
    emb = local_embedder.embed(tensors)
    assert cosine(emb[0], emb[1]) >= 0.999


def test_reduced_decode_leaves_small_jpegs_and_other_formats_whole():
    small = encode(synthetic_photo(1, (400, 300)))  # under twice 224 on its short side
    assert decode_image(small, reduce_to=224).size == (400, 300)
    png = _png(synthetic_photo(1, (1000, 800)))
    assert decode_image(png, reduce_to=224).size == (1000, 800)
    assert np.array_equal(preprocess_bytes(small), preprocess_pil(decode_image(small)))


def test_reduced_decode_checks_the_limits_on_the_full_size():
    data = encode(synthetic_photo(6, (2000, 1500)))
    with pytest.raises(ImageDecodeError) as err:
        preprocess_bytes(data, max_pixels=2_999_999)
    assert err.value.kind == "too_many_pixels"
