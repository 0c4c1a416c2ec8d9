"""One dynamic batch for the CPU python-backend encoders (openclip_vit_b32_cpu, openclip_vit_b32_emulated and their
`_uint8` variants): the requests' images filled into one float32 [N, 3, 224, 224], uint8 pixels normalised
straight into it, and one response per request.

    arrays = request_arrays(requests, self.input_name, pb_utils)   # in model.py's execute (pb_utils: the stub's)
    batch = float_batch(arrays)                                     # float32 [N, 3, 224, 224], in request order
    return responses(arrays, embeddings, pb_utils)

The uint8 input: each CPU encoder has a variant, `<encoder>_uint8` (servelab.triton.models.uint8_model), written
by `servelab triton stage` from the encoder's own config with its one input changed to uint8 `pixels_uint8` [3,
224, 224] (the crop before normalisation: 150,528 bytes instead of 602,112) and the same model.py, which takes
whatever its config declares. Why a second model rather than a second, optional input of the same model: with
optional inputs, perf_analyzer's random data (the lines the lessons type, `--shape pixel_values:3,224,224`) sends
every input, so each of its requests would carry both tensors and be refused or, worse, measured with 752 KB
bodies; a model with one required input keeps every existing client and line as it is. Nothing is lost to
batching: Triton's dynamic batcher batches only requests that carry the same set of inputs, so float32 and uint8
requests would never have shared a batch anyway. Triton checks the variant's dtype and shape itself before the
model runs (a uint8 body of the wrong size is refused with Triton's own message). The cost: the variant has its
own instances; for the ONNX encoder that is a second ONNX Runtime session (its memory, and its load at start).
"""

from __future__ import annotations

import numpy as np

from servelab.model.contract import OUTPUT_NAME
from servelab.model.preprocess import normalise


def request_arrays(requests, input_name: str, pb_utils) -> list[np.ndarray]:
    """Each request's input tensor `input_name` as numpy (Triton has checked its dtype and shape)."""
    return [pb_utils.get_input_tensor_by_name(r, input_name).as_numpy() for r in requests]


def float_batch(arrays: list[np.ndarray]) -> np.ndarray:
    """The arrays, in order, as one float32 [N, 3, 224, 224]: uint8 pixels normalised straight into it, float32
    copied in; a single float32 array is returned as it is (no copy)."""
    if len(arrays) == 1 and arrays[0].dtype == np.float32:
        return arrays[0]
    batch = np.empty((sum(a.shape[0] for a in arrays), *arrays[0].shape[1:]), np.float32)
    start = 0
    for a in arrays:
        rows = batch[start : start + a.shape[0]]
        if a.dtype == np.uint8:
            normalise(a, out=rows)
        else:
            rows[...] = a
        start += a.shape[0]
    return batch


def responses(arrays: list[np.ndarray], embeddings: np.ndarray, pb_utils) -> list:
    """One response per request, in order: its rows of `embeddings` (the batch's, in float_batch's order)."""
    out, start = [], 0
    for a in arrays:
        part = np.ascontiguousarray(embeddings[start : start + a.shape[0]], dtype=np.float32)
        out.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(OUTPUT_NAME, part)]))
        start += a.shape[0]
    return out
