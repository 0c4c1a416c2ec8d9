"""The model's contract: what every engine, the service, the clients, Triton's configs and the export agree on.

    from servelab.model.contract import EMBED_DIM, INPUT_NAME, INPUT_SHAPE, OUTPUT_NAME
    np.zeros((0, EMBED_DIM), dtype=DTYPE)            # an empty answer
    tc.InferInput(INPUT_NAME, [n, *INPUT_SHAPE], TRITON_DTYPE)

Triton's staged `config.pbtxt` files are static text; tests/unit/test_contract.py checks that they say the same.
"""

from __future__ import annotations

IMAGE_SIZE = 224  # the side of the square CLIP crop, in pixels
INPUT_SHAPE = (3, IMAGE_SIZE, IMAGE_SIZE)  # one preprocessed image, CHW
EMBED_DIM = 512  # ViT-B/32's image embedding, L2-normalised
DTYPE = "float32"  # input tensors and embeddings (numpy's name)
TRITON_DTYPE = "FP32"  # the same, in Triton's words
# the service also takes an image as uint8 pixels, resized and cropped but not normalised (a quarter of the bytes;
# the service normalises them); the encoder itself always takes float32
PIXEL_DTYPE = "uint8"
TENSOR_DTYPES = (DTYPE, PIXEL_DTYPE)  # what the service's tensor route accepts (X-Dtype)

INPUT_NAME = "pixel_values"  # the encoder's input: float32 [N, 3, 224, 224]
PIXEL_INPUT_NAME = "pixels_uint8"  # the CPU Triton encoders' other input: uint8 pixels [N, 3, 224, 224], normalised there
TRITON_PIXEL_DTYPE = "UINT8"  # its dtype, in Triton's words
OUTPUT_NAME = "embedding"  # the encoder's output: float32 [N, 512]
JPEG_INPUT_NAME = "IMAGE"  # the JPEG ensemble's input: BYTES [N, 1], one encoded image per row
