"""Triton backends for InferenceClient (`triton-http`, `triton-grpc`): binary tensors or image bytes.

    from servelab.client.triton import TritonBackend, TritonInferenceError, TritonUnavailable
    b = TritonBackend("http" | "grpc", url)    # models default to triton.models CPU_ENCODER / ENSEMBLE
    b.embed_tensor(float32 [N,3,224,224]) -> float32 [N,512]   # FP32 input `pixel_values`, binary (never JSON lists)
    b.embed_tensor(uint8 [N,3,224,224])   -> float32 [N,512]   # UINT8 `pixels_uint8` to `<model>_uint8`: the crop's
                                                               # pixels before normalisation, a quarter of the bytes
    b.embed_encoded([jpeg_bytes, ...])    -> float32 [N,512]   # BYTES input `IMAGE` [N,1] to the ensemble
    b.ready() -> bool                                          # server live AND `model` ready
    b.weights, b.info(), b.model_config(model=None) -> dict, b.close(), b.url, b.protocol,
    b.model, b.pixel_model, b.jpeg_model
    with TritonBackend("grpc", srv.grpc_url) as b: ...       # closes its client on exit

Also usable through `InferenceClient(mode="remote", backend="triton-http"|"triton-grpc", url=..., model=...)`.
Default URLs come from the configured ports: HTTP 127.0.0.1:8003, gRPC 127.0.0.1:8004 (SERVELAB_TRITON_URL /
SERVELAB_TRITON_GRPC_URL override; the model names can be overridden with SERVELAB_TRITON_MODEL and
SERVELAB_TRITON_JPEG_MODEL — on a GPU node the encoder is `openclip_vit_b32` or `openclip_vit_b32_trt`, which
have no uint8 variant: Triton answers that `<model>_uint8` is unknown).
URLs may be given with or without "http://" / "grpc://".

Each backend holds exactly one tritonclient client (a single connection for HTTP). tritonclient's HTTP client
is not thread-safe (gevent), so give each thread its own TritonBackend / InferenceClient.
Errors: whatever Triton refuses (wrong input name/dtype/shape, batch over max_batch_size, undecodable image,
model not loaded) raises TritonInferenceError carrying Triton's own message; a server that does not answer
raises TritonUnavailable (also a ServiceUnavailable). Both are InferenceError.
"""

from __future__ import annotations

import re

import numpy as np

from servelab.client.base import Backend
from servelab.client.errors import InferenceError, ServiceUnavailable
from servelab.config import TRITON_GRPC_PORT, TRITON_HTTP_PORT, Settings
from servelab.errors import InvalidValue
from servelab.model.contract import (
    EMBED_DIM,
    INPUT_NAME,
    JPEG_INPUT_NAME,
    OUTPUT_NAME,
    PIXEL_INPUT_NAME,
    TRITON_DTYPE,
    TRITON_PIXEL_DTYPE,
)
from servelab.triton.control import address
from servelab.triton.models import CPU_ENCODER, ENSEMBLE, uint8_model

DEFAULT_HTTP_URL = f"127.0.0.1:{TRITON_HTTP_PORT}"
DEFAULT_GRPC_URL = f"127.0.0.1:{TRITON_GRPC_PORT}"
PROTOCOLS = ("http", "grpc")


class TritonInferenceError(InferenceError):
    """Triton refused or failed a request; `message` is Triton's own text, `status` its HTTP/gRPC status."""


class TritonUnavailable(TritonInferenceError, ServiceUnavailable):
    """No Triton server answered at the URL (or it timed out)."""


_UNAVAILABLE_GRPC = ("StatusCode.UNAVAILABLE", "StatusCode.DEADLINE_EXCEEDED")


class TritonBackend(Backend):
    def __init__(self, protocol: str = "http", url: str | None = None, timeout: float = 60.0, *,
                 model: str | None = None, jpeg_model: str | None = None, input_name: str = INPUT_NAME,
                 output_name: str = OUTPUT_NAME, jpeg_input_name: str = JPEG_INPUT_NAME,
                 pixel_input_name: str = PIXEL_INPUT_NAME, pixel_model: str | None = None, verbose: bool = False):
        if protocol not in PROTOCOLS:
            raise InvalidValue(f"protocol must be one of {', '.join(PROTOCOLS)}, got {protocol!r}")
        self.protocol = protocol
        self.name = f"triton-{protocol}"
        if not (url and model and jpeg_model):  # what the caller left out comes from SERVELAB_TRITON_*
            s = Settings.from_env()
            url = url or (s.triton_url if protocol == "http" else s.triton_grpc_url)
            model, jpeg_model = model or s.triton_model, jpeg_model or s.triton_jpeg_model
        self.address = address(url or (DEFAULT_HTTP_URL if protocol == "http" else DEFAULT_GRPC_URL))
        self.url = f"http://{self.address}" if protocol == "http" else self.address
        self.timeout = float(timeout)
        self.model = model or CPU_ENCODER
        self.jpeg_model = jpeg_model or ENSEMBLE
        self.input_name, self.output_name, self.jpeg_input_name = input_name, output_name, jpeg_input_name
        self.pixel_input_name = pixel_input_name
        self.pixel_model = pixel_model or uint8_model(self.model)
        self._weights: str | None = None
        if protocol == "http":
            import tritonclient.http as tc

            self._tc = tc
            self.client = tc.InferenceServerClient(self.address, verbose=verbose, concurrency=1,
                                                   connection_timeout=self.timeout, network_timeout=self.timeout)
        else:
            import tritonclient.grpc as tc

            self._tc = tc
            self.client = tc.InferenceServerClient(self.address, verbose=verbose)
        from tritonclient.utils import InferenceServerException

        self._exc = InferenceServerException

    # --- errors -----------------------------------------------------------------------------------
    def _error(self, exc: BaseException) -> InferenceError:
        if isinstance(exc, self._exc):
            msg = re.sub(r"^\[request id: [^\]]*\]\s*", "", exc.message() or str(exc))
            status = exc.status()
            if status in _UNAVAILABLE_GRPC or "failed to connect" in msg.lower() or "connection refused" in msg.lower():
                return TritonUnavailable(f"no Triton server answering at {self.url}: {msg}", code=status,
                                         backend=self.name)
            http_status = None
            if status and str(status).isdigit():
                http_status = int(status)
            return TritonInferenceError(msg, status=http_status, code=None if http_status else status,
                                        backend=self.name)
        # HTTP transport errors (geventhttpclient): refused, reset, timeout
        return TritonUnavailable(f"no Triton server answering at {self.url}: {type(exc).__name__}: {exc}",
                                 backend=self.name)

    def _infer(self, model: str, inputs, output: str):
        tc = self._tc
        try:
            if self.protocol == "http":
                outputs = [tc.InferRequestedOutput(output, binary_data=True)]
                result = self.client.infer(model, inputs, outputs=outputs)  # network_timeout bounds the wait
            else:
                outputs = [tc.InferRequestedOutput(output)]
                result = self.client.infer(model, inputs, outputs=outputs, client_timeout=self.timeout)
        except self._exc as exc:
            raise self._error(exc) from None
        except (OSError, ConnectionError, TimeoutError) as exc:
            raise self._error(exc) from None
        except Exception as exc:  # gevent / geventhttpclient raise their own socket errors
            if type(exc).__module__.startswith(("gevent", "geventhttpclient", "socket", "ssl")):
                raise self._error(exc) from None
            raise
        out = result.as_numpy(output)
        if out is None:
            raise TritonInferenceError(f"response from {model} has no output {output!r}", backend=self.name)
        return np.asarray(out, dtype=np.float32)

    def _input(self, name: str, arr: np.ndarray, datatype: str):
        tc = self._tc
        inp = tc.InferInput(name, list(arr.shape), datatype)
        if self.protocol == "http":
            inp.set_data_from_numpy(arr, binary_data=True)
        else:
            inp.set_data_from_numpy(arr)
        return inp

    # --- Backend ----------------------------------------------------------------------------------
    def embed_tensor(self, batch: np.ndarray) -> np.ndarray:
        """float32 [N, 3, 224, 224] to `model`'s `input_name`; uint8 pixels of that shape (resized and cropped, not
        normalised) to `pixel_model`'s `pixel_input_name`, the encoder's uint8 variant that normalises them
        (servelab.triton.python_batch), as the FastAPI client sends X-Dtype uint8. Any other dtype goes as it is to
        `input_name`: no silent conversion (a float64 tensor is a caller bug, and Triton says so in its error), as
        does a shape the model does not take."""
        batch = np.ascontiguousarray(batch)
        if batch.dtype == np.uint8:
            return self._infer(self.pixel_model, [self._input(self.pixel_input_name, batch, TRITON_PIXEL_DTYPE)],
                               self.output_name)
        dtype = {np.dtype(np.float32): TRITON_DTYPE, np.dtype(np.float64): "FP64", np.dtype(np.float16): "FP16",
                 np.dtype(np.int32): "INT32", np.dtype(np.int64): "INT64"}.get(batch.dtype)
        if dtype is None:
            raise TritonInferenceError(f"unsupported tensor dtype {batch.dtype}; send float32 or uint8",
                                       backend=self.name)
        return self._infer(self.model, [self._input(self.input_name, batch, dtype)], self.output_name)

    def embed_encoded(self, blobs) -> np.ndarray:
        if len(blobs) == 0:
            return np.zeros((0, EMBED_DIM), dtype=np.float32)
        arr = np.empty((len(blobs), 1), dtype=object)
        for i, b in enumerate(blobs):
            arr[i, 0] = bytes(b)
        return self._infer(self.jpeg_model, [self._input(self.jpeg_input_name, arr, "BYTES")], self.output_name)

    def ready(self) -> bool:
        try:
            ok = bool(self.client.is_server_live()) and bool(self.client.is_model_ready(self.model))
        except Exception:
            return False
        return ok

    def model_config(self, model: str | None = None) -> dict:
        """The model's config as a dict (same shape for HTTP and gRPC)."""
        try:
            if self.protocol == "http":
                return self.client.get_model_config(model or self.model)
            from google.protobuf.json_format import MessageToDict

            cfg = self.client.get_model_config(model or self.model).config
            return MessageToDict(cfg, preserving_proto_field_name=True)
        except self._exc as exc:
            raise self._error(exc) from None

    @property
    def weights(self) -> str:
        """The weights label `servelab triton stage` wrote into the model config (fetched once, cached)."""
        if self._weights is None:
            try:
                params = self.model_config().get("parameters", {})
                self._weights = params.get("weights", {}).get("string_value", "")
            except Exception:
                return ""  # server not reachable yet: try again next time
        return self._weights

    def info(self) -> dict:
        return {"backend": self.name, "url": self.url, "model": self.model, "pixel_model": self.pixel_model,
                "jpeg_model": self.jpeg_model,
                "weights": self.weights}

    def close(self) -> None:
        try:
            self.client.close()
        except Exception:
            pass

    def __enter__(self) -> TritonBackend:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
