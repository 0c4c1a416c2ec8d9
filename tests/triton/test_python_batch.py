"""The batch the CPU python-backend encoders build from their requests (servelab.triton.python_batch): uint8
pixels normalised into it exactly as the client-side normalisation would, float32 copied in, order kept."""

from __future__ import annotations

import numpy as np

from servelab.model.preprocess import normalise
from servelab.triton.python_batch import float_batch


def test_mixed_requests_fill_one_float32_batch_in_request_order():
    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 256, (2, 3, 224, 224), dtype=np.uint8)
    floats = rng.standard_normal((1, 3, 224, 224)).astype(np.float32)
    batch = float_batch([pixels[:1], floats, pixels[1:]])
    assert batch.dtype == np.float32 and batch.shape == (3, 3, 224, 224) and batch.flags.c_contiguous
    np.testing.assert_array_equal(batch[0], normalise(pixels[0]))
    np.testing.assert_array_equal(batch[1], floats[0])
    np.testing.assert_array_equal(batch[2], normalise(pixels[1]))


def test_one_float32_request_is_passed_without_a_copy_and_one_uint8_request_is_normalised():
    floats = np.zeros((2, 3, 224, 224), np.float32)
    assert float_batch([floats]) is floats
    pixels = np.full((1, 3, 224, 224), 255, np.uint8)
    np.testing.assert_array_equal(float_batch([pixels]), normalise(pixels))
