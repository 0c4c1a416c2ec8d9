"""Triton python-backend model: image file bytes -> normalised float32 [3, 224, 224].

Uses servelab.model.preprocess (PIL + numpy), the same code as the client and the FastAPI service, so the
JPEG ensemble yields the same embedding as client-side preprocessing. When `servelab` is not importable by
the stub's python3, the `servelab_path` parameter (written by `servelab triton stage`) is put on sys.path.
Each image is decoded on its own: a corrupt one fails only its own request, with the decoder's reason.
"""

import json
import sys

import numpy as np
import triton_python_backend_utils as pb_utils

INPUT = "IMAGE"
OUTPUT = "pixel_values"


def _import_preprocess(extra_path):
    try:
        from servelab.model import preprocess
    except ImportError:
        if not extra_path:
            raise
        sys.path.insert(0, extra_path)
        from servelab.model import preprocess
    return preprocess


def _bad_input(message):
    """A client error (HTTP 400 / INVALID_ARGUMENT) where the backend supports codes, else Triton's default."""
    try:
        return pb_utils.TritonError(message, pb_utils.TritonError.INVALID_ARG)
    except (AttributeError, TypeError):
        return pb_utils.TritonError(message)


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        params = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        try:
            self.pre = _import_preprocess(params.get("servelab_path", ""))
        except ImportError as exc:
            raise pb_utils.TritonModelException(
                f"cannot import servelab.model.preprocess ({exc}); install servelab into the python that runs "
                "the stub or set the servelab_path parameter (servelab triton stage does)"
            ) from exc
        self.limits = {
            "max_bytes": int(params.get("max_bytes") or self.pre.DEFAULT_MAX_BYTES),
            "max_pixels": int(params.get("max_pixels") or self.pre.DEFAULT_MAX_PIXELS),
        }

    def _one(self, request):
        blobs = pb_utils.get_input_tensor_by_name(request, INPUT).as_numpy().reshape(-1)
        out = np.empty((len(blobs), *self.pre.INPUT_SHAPE), dtype=np.float32)
        for i, blob in enumerate(blobs):
            data = blob if isinstance(blob, bytes) else bytes(blob)
            try:
                out[i] = self.pre.preprocess_bytes(data, **self.limits)
            except self.pre.ImageDecodeError as exc:
                return self._reject(i, len(blobs), f"{exc} [{exc.kind}]")
            except (OSError, SyntaxError, ValueError, EOFError) as exc:  # PIL errors decode_image lets through
                return self._reject(i, len(blobs), f"image data is corrupt or truncated: {exc} [corrupt]")
        return pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(OUTPUT, out)])

    @staticmethod
    def _reject(i, n, message):
        where = f"image {i}: " if n > 1 else ""
        return pb_utils.InferenceResponse(output_tensors=[], error=_bad_input(where + message))

    def execute(self, requests):
        return [self._one(r) for r in requests]
