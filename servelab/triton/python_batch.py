"""One dynamic batch for the CPU python-backend encoders (openclip_vit_b32_cpu, openclip_vit_b32_emulated), from
requests that each send the image as float32 `pixel_values` (normalised) or as uint8 `pixels_uint8` (the same
crop before normalisation: 150,528 bytes instead of 602,112), normalised here into the batch.

    arrays, errors = request_arrays(requests, pb_utils)    # in model.py's execute (pb_utils: the stub's module)
    batch = float_batch(arrays)                             # float32 [N, 3, 224, 224], in request order
    return responses(requests, arrays, errors, embeddings, pb_utils)

Why two optional inputs of one model rather than a second model for uint8: the encoder is loaded once (one set
of instances and, on a GPU, one copy of the weights and one device queue for both kinds of client), staging has
one config per encoder to write, and a client changes only the input it names. Triton checks each input's dtype
and shape against the config before the model sees it (a uint8 body of the wrong size is refused with Triton's
own message), and with optional inputs its dynamic batcher batches only requests that carry the same set of
inputs, so one execution holds one kind. What `optional` gives up: Triton no longer insists on an input, so a
request that sends neither or both is refused here, by that request's own error response.
"""

from __future__ import annotations

import numpy as np

from servelab.model.contract import INPUT_NAME, OUTPUT_NAME, PIXEL_INPUT_NAME
from servelab.model.preprocess import normalise


def request_arrays(requests, pb_utils) -> tuple[dict[int, np.ndarray], dict[int, str]]:
    """({request index: the array it sent}, {request index: why it is refused}): one of the two inputs each."""
    arrays, errors = {}, {}
    for i, r in enumerate(requests):
        sent = [t for t in (pb_utils.get_input_tensor_by_name(r, n) for n in (INPUT_NAME, PIXEL_INPUT_NAME))
                if t is not None]
        if len(sent) == 1:
            arrays[i] = sent[0].as_numpy()
        else:
            errors[i] = (f"send one input: float32 {INPUT_NAME!r} (normalised) or uint8 {PIXEL_INPUT_NAME!r} "
                         f"(pixels), not {'both' if sent else 'neither'}")
    return arrays, errors


def float_batch(arrays: dict[int, np.ndarray]) -> np.ndarray:
    """The arrays, in order, as one float32 [N, 3, 224, 224]: uint8 pixels normalised straight into it, float32
    copied in; a single float32 array is returned as it is (no copy)."""
    parts = list(arrays.values())
    if len(parts) == 1 and parts[0].dtype == np.float32:
        return parts[0]
    batch = np.empty((sum(a.shape[0] for a in parts), *parts[0].shape[1:]), np.float32)
    start = 0
    for a in parts:
        rows = batch[start : start + a.shape[0]]
        if a.dtype == np.uint8:
            normalise(a, out=rows)
        else:
            rows[...] = a
        start += a.shape[0]
    return batch


def responses(requests, arrays: dict[int, np.ndarray], errors: dict[int, str], embeddings, pb_utils) -> list:
    """One response per request, in order: its rows of `embeddings` (the batch's, in float_batch's order), or its
    error."""
    out, start = [], 0
    for i in range(len(requests)):
        if i in errors:
            error = pb_utils.TritonError(errors[i], pb_utils.TritonError.INVALID_ARG)  # the client's mistake: 400
            out.append(pb_utils.InferenceResponse(output_tensors=[], error=error))
            continue
        n = arrays[i].shape[0]
        part = np.ascontiguousarray(embeddings[start : start + n], dtype=np.float32)
        out.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(OUTPUT_NAME, part)]))
        start += n
    return out
