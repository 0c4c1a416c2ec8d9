"""The torch engine assembling a batch on its device (`TorchEmbedder.embed_parts`), run here on the CPU: float32
tensors, uint8 pixels (normalised by the engine) and JPEG files (decoded by the engine) in one batch.

torchvision's `decode_jpeg` is the engine's decoder; where its image extension does not load (a torchvision built
for another torch, as in the lab's CPU venv) the JPEG tests run with `pil_jpeg_decoder` in its place, a real
decoder (PIL) standing in for torchvision's, and say so in their names; the test with torchvision's own decoder
is then skipped with the reason. On a GPU, tests/gpu runs nvJPEG itself."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from servelab.model.gpu_decode import JpegImages, decoder_check
from servelab.model.preprocess import ImageDecodeError, decode_image, pixels_pil, preprocess_batch, preprocess_bytes
from tests.conftest import cosine

TORCHVISION_CPU = decoder_check("cpu")
needs_torchvision_decoder = pytest.mark.skipif(
    TORCHVISION_CPU is not None, reason=f"torchvision's decode_jpeg cannot run on the CPU here: {TORCHVISION_CPU}")
STANDIN = "PIL in place of torchvision's decode_jpeg (a test stand-in)"


def pil_jpeg_decoder(blobs: list[bytes], device: str = "cpu") -> list:
    """A decoder with decode_jpegs's contract (bytes list -> uint8 [3, H, W] tensors on `device`; an exception for a
    file that does not decode), by PIL: it stands in for torchvision's where torchvision's image ops cannot load."""
    import torch

    out = []
    for blob in blobs:
        with Image.open(io.BytesIO(blob)) as img:
            img.load()  # a truncated file raises here
            rgb = np.ascontiguousarray(np.asarray(img.convert("RGB")).transpose(2, 0, 1))
        out.append(torch.from_numpy(rgb).to(device))
    return out


class CountingDecoder:
    """pil_jpeg_decoder, counting its calls and the files of each."""

    def __init__(self):
        self.calls: list[int] = []

    def __call__(self, blobs, device="cpu"):
        self.calls.append(len(blobs))
        return pil_jpeg_decoder(blobs, device)


@pytest.fixture(scope="module")
def decoder() -> CountingDecoder:
    return CountingDecoder()


@pytest.fixture(scope="module")
def engine(settings, decoder):
    """The torch engine on the CPU with CUDA graphs asked for (a CPU has none: the setting must be harmless)."""
    from servelab.model.engines import TorchEmbedder

    return TorchEmbedder(settings.with_(engine="torch", provider="cpu", max_batch=16, cuda_graphs=True),
                         jpeg_decoder=decoder, decoder_name=STANDIN)


@pytest.fixture(scope="module")
def reference(engine, photos) -> np.ndarray:
    """The photos' embeddings by the CPU path (PIL + numpy preprocessing, a float32 batch)."""
    return engine.embed(preprocess_batch(photos))


def test_uint8_pixels_normalised_by_the_engine_give_the_float32_tensors_embeddings(engine, photos):
    pixels = np.stack([pixels_pil(decode_image(p, reduce_to=224)) for p in photos[:3]])
    from servelab.model.preprocess import normalise

    as_float, as_uint8 = engine.embed_parts([normalise(pixels)])[0], engine.embed_parts([pixels])[0]
    assert as_uint8.shape == (3, 512)
    assert cosine(as_float, as_uint8).min() >= 0.9999


def test_a_batch_of_mixed_parts_gives_each_part_its_own_rows(engine, photos, reference, decoder):
    """float32, uint8 and JPEG parts in one batch (the JPEG parts apart, so their rows are not the batch's first):
    each part gets its rows, as it would alone; every JPEG of the batch is decoded in one call."""
    pixels = np.stack([pixels_pil(decode_image(p, reduce_to=224)) for p in photos[2:4]])
    decoder.calls.clear()
    parts = [preprocess_batch(photos[:2]), JpegImages(tuple(photos[4:6])), pixels, JpegImages(tuple(photos[6:]))]
    out = engine.embed_parts(parts)
    assert decoder.calls == [4]
    assert [o.shape[0] for o in out] == [2, 2, 2, 2]
    assert cosine(np.concatenate([out[0], out[2], out[1], out[3]]), reference).min() >= 0.999


def test_jpegs_decoded_by_the_stand_in_match_the_pil_path(engine, photos, reference, decoder):
    decoder.calls.clear()
    out = engine.embed_parts([JpegImages((p,)) for p in photos])
    assert decoder.calls == [len(photos)]  # one call for the whole batch, eight requests
    assert cosine(np.concatenate(out), reference).min() >= 0.999


@needs_torchvision_decoder
def test_jpegs_decoded_by_torchvision_on_the_cpu_match_the_pil_path(settings, photos, reference):
    from servelab.model.engines import TorchEmbedder

    engine = TorchEmbedder(settings.with_(engine="torch", provider="cpu"))
    assert engine.decode_error() is None
    out = engine.embed_parts([JpegImages(tuple(photos))])[0]
    assert cosine(out, reference).min() >= 0.999


def test_a_corrupt_jpeg_fails_its_own_request_with_the_cpu_paths_words(engine, photos, reference, decoder):
    truncated = photos[0][: len(photos[0]) // 3]
    decoder.calls.clear()
    good, bad = engine.embed_parts([JpegImages((photos[1],)), JpegImages((photos[2], truncated))])
    with pytest.raises(ImageDecodeError) as on_cpu:
        preprocess_bytes(truncated)
    assert isinstance(bad, ImageDecodeError) and bad.kind == on_cpu.value.kind == "corrupt"
    assert str(bad) == f"image 1: {on_cpu.value}"  # the decode pool's words: image_error(1, its error)
    assert cosine(good, reference[1:2]).min() >= 0.999
    assert decoder.calls[0] == 3  # the batch's one call failed; then each file alone found the bad one


def test_a_file_the_device_decoder_refuses_and_the_cpu_reads_is_served(settings, photos, reference):
    """A device decoder that cannot read one file (as nvJPEG refuses some a CPU decoder reads): that file is
    decoded on the CPU, as the decode pool would, and its request answered; the others still on the device."""
    from servelab.model.engines import TorchEmbedder

    refused = photos[3]

    def picky(blobs, device="cpu"):
        if refused in blobs:
            raise RuntimeError("this decoder cannot read that file")
        return pil_jpeg_decoder(blobs, device)

    engine = TorchEmbedder(settings.with_(engine="torch", provider="cpu"), jpeg_decoder=picky, decoder_name=STANDIN)
    out = engine.embed_parts([JpegImages(tuple(photos[2:5])), JpegImages((photos[5],))])
    assert not any(isinstance(o, Exception) for o in out)
    assert cosine(np.concatenate(out), reference[2:6]).min() >= 0.999


def test_cuda_only_parts_are_off_on_a_cpu(engine):
    from servelab.model.engines import capture_cuda_graph  # noqa: F401  (importable without CUDA)

    info = engine.info()
    assert info["cuda_graphs"] is None and info["host_buffers"] == "numpy arrays as they came"
    assert engine.buckets() == [1, 2, 4, 8, 16]
    assert info["decoder"] == STANDIN
