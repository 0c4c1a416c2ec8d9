"""Triton python-backend model on a GPU: image file bytes -> normalised float32 [3, 224, 224], left on the GPU.

Every request of the batch Triton hands over is decoded together: the JPEGs the device reads as the CPU path does
(servelab.model.gpu_decode.device_decodable: baseline, RGB or grey, upright) in one batched nvJPEG call on this
instance's GPU (torchvision's decode_jpeg, servelab.model.gpu_decode), resized, cropped and normalised there; any
other file (PNG, WebP, a rotated, CMYK or progressive JPEG) by servelab.model.preprocess on the CPU, the client's
and the service's code, then copied to the GPU. The output stays on the device (DLPack), so the ensemble's encoder
reads it there. A corrupt file fails only its own request, with the decoder's reason. The stub's python needs
torch and torchvision with CUDA; when `servelab` is not importable by it, the `servelab_path` parameter (written by
`servelab triton stage`) is put on sys.path. The CPU staging keeps its PIL model (staging/cpu/preprocess_jpeg).
"""

import json
import sys

import triton_python_backend_utils as pb_utils

INPUT = "IMAGE"
OUTPUT = "pixel_values"


def _import_servelab(extra_path):
    try:
        from servelab.model import gpu_decode, preprocess
    except ImportError:
        if not extra_path:
            raise
        sys.path.insert(0, extra_path)
        from servelab.model import gpu_decode, preprocess
    return gpu_decode, preprocess


def _bad_input(message):
    """A client error (HTTP 400 / INVALID_ARGUMENT) where the backend supports codes, else Triton's default."""
    try:
        return pb_utils.TritonError(message, pb_utils.TritonError.INVALID_ARG)
    except (AttributeError, TypeError):
        return pb_utils.TritonError(message)


class _Refused(Exception):
    """One request's refusal: its message names the image."""


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        params = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        try:
            self.gpu, self.pre = _import_servelab(params.get("servelab_path", ""))
            import torch
            from torch.utils import dlpack
        except ImportError as exc:
            raise pb_utils.TritonModelException(
                f"cannot import servelab.model.gpu_decode with torch ({exc}); this GPU model needs torch and "
                "torchvision with CUDA in the python that runs the stub, and servelab (the servelab_path parameter)"
            ) from exc
        self.torch, self.dlpack = torch, dlpack
        self.device = f"cuda:{args.get('model_instance_device_id', '0')}"
        why = self.gpu.decoder_check(self.device)
        if why is not None:
            raise pb_utils.TritonModelException(f"nvJPEG (torchvision decode_jpeg) cannot run on {self.device}: {why}")
        self.limits = {
            "max_bytes": int(params.get("max_bytes") or self.pre.DEFAULT_MAX_BYTES),
            "max_pixels": int(params.get("max_pixels") or self.pre.DEFAULT_MAX_PIXELS),
        }

    def execute(self, requests):
        blobs = []
        for r in requests:
            data = pb_utils.get_input_tensor_by_name(r, INPUT).as_numpy().reshape(-1)
            blobs.append([b if isinstance(b, bytes) else bytes(b) for b in data])
        with self.torch.inference_mode():
            outs = self._all(blobs)
        responses = []
        for out in outs:
            if isinstance(out, _Refused):
                responses.append(pb_utils.InferenceResponse(output_tensors=[], error=_bad_input(str(out))))
            else:
                tensor = pb_utils.Tensor.from_dlpack(OUTPUT, self.dlpack.to_dlpack(out))
                responses.append(pb_utils.InferenceResponse(output_tensors=[tensor]))
        return responses

    def _all(self, blobs):
        """Each request's pixels on the GPU, or its refusal; the device's JPEGs of all requests in one call."""
        torch = self.torch
        outs = [torch.empty((len(b), *self.pre.INPUT_SHAPE), dtype=torch.float32, device=self.device) for b in blobs]
        on_device = [(r, i) for r, request in enumerate(blobs) for i, blob in enumerate(request)
                     if self.gpu.device_decodable(blob, **self.limits)]
        refused = {}
        if on_device:
            try:
                images = self.gpu.decode_jpegs([blobs[r][i] for r, i in on_device], device=self.device)
            except Exception:  # a corrupt file fails the batched call: find it, one file at a time
                images = None
            if images is not None:
                done = torch.empty((len(on_device), *self.pre.INPUT_SHAPE), dtype=torch.float32, device=self.device)
                self.gpu.pixels_into(images, done)
                for k, (r, i) in enumerate(on_device):
                    outs[r][i] = done[k]
            else:
                for r, i in on_device:
                    if r in refused:
                        continue
                    try:
                        self.gpu.pixels_into(self.gpu.decode_jpegs([blobs[r][i]], device=self.device), outs[r][i:i + 1])
                    except Exception as exc:
                        refused[r] = self._refusal(i, len(blobs[r]), f"image data is corrupt or truncated (nvJPEG: "
                                                   f"{str(exc).strip()[:200]}) [corrupt]")
        device_set = set(on_device)
        for r, request in enumerate(blobs):
            for i, blob in enumerate(request):
                if r in refused or (r, i) in device_set:
                    continue
                try:
                    outs[r][i] = torch.from_numpy(self.pre.preprocess_bytes(blob, **self.limits)).to(self.device)
                except self.pre.ImageDecodeError as exc:
                    refused[r] = self._refusal(i, len(request), f"{exc} [{exc.kind}]")
                except (OSError, SyntaxError, ValueError, EOFError) as exc:  # PIL errors decode_image lets through
                    refused[r] = self._refusal(i, len(request), f"image data is corrupt or truncated: {exc} [corrupt]")
        return [refused.get(r, out) for r, out in enumerate(outs)]

    @staticmethod
    def _refusal(i, n, message):
        return _Refused((f"image {i}: " if n > 1 else "") + message)

