"""FastAPI inference service: images (or ready tensors) in, L2-normalised 512-d embeddings out.

The model loads and warms up in a background thread after the server starts listening, so `/healthz`
answers at once and `/readyz` turns true only when a real batch has run. Decoding runs in worker threads and
inference in the micro-batcher's engine thread: the event loop only moves bytes. Every bad input gets a 4xx
JSON body `{"error": {"code", "message"}}` naming the problem; a full queue gets 503 with Retry-After.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import platform
import threading
import time
from contextlib import asynccontextmanager

import numpy as np
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

import servelab
from servelab.config import Settings
from servelab.model.preprocess import INPUT_SHAPE, ImageDecodeError, preprocess_bytes
from servelab.model.weights import EMBED_DIM, weights_label
from servelab.service.batcher import MicroBatcher, QueueFull

log = logging.getLogger("servelab.service")

IMAGE_TYPES = {"image/jpeg", "image/png", "image/webp", "image/jpg"}
BINARY_TYPE = "application/octet-stream"


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, headers: dict | None = None):
        super().__init__(message)
        self.status, self.code, self.message, self.headers = status, code, message, headers or {}


_DECODE_STATUS = {"too_large": 413, "too_many_pixels": 413}


class Metrics:
    def __init__(self):
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("servelab_requests", "HTTP requests by endpoint and status", ["endpoint", "status"], registry=r)
        self.latency = Histogram(
            "servelab_request_latency_seconds", "Request latency by endpoint", ["endpoint"], registry=r,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 10),
        )
        self.batch = Histogram(
            "servelab_batch_size", "Images per engine call", registry=r, buckets=(1, 2, 4, 8, 12, 16, 24, 32, 64)
        )
        self.images = Counter("servelab_images", "Images embedded", registry=r)
        self.queue = Gauge("servelab_queue_depth", "Images waiting for the engine", registry=r)
        self.rejections = Counter("servelab_rejections", "Requests refused, by reason", ["reason"], registry=r)


class State:
    def __init__(self, settings: Settings):
        self.settings = settings
        self.embedder = None
        self.ready = False
        self.load_error: str | None = None
        self.weights = weights_label(settings)
        self.batcher: MicroBatcher | None = None
        self.started = time.time()


def create_app(settings: Settings | None = None, embedder=None) -> FastAPI:
    settings = settings or Settings.from_env()
    state = State(settings)
    metrics = Metrics()

    def load_and_warm():
        try:
            t0 = time.perf_counter()
            emb = embedder
            if emb is None:
                from servelab.model.engines import make_embedder

                emb = make_embedder(settings)
            state.embedder = emb
            state.weights = emb.weights
            dummy = np.zeros((min(settings.max_batch, 16), *INPUT_SHAPE), dtype=np.float32)
            for _ in range(max(settings.warmup_iters, 1)):
                emb.embed(dummy)
            state.ready = True
            log.info("model ready in %.1fs: %s", time.perf_counter() - t0, emb.info())
        except Exception as exc:  # keep serving /healthz so the reason is visible
            state.load_error = f"{type(exc).__name__}: {exc}"
            log.error("model failed to load: %s", state.load_error)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        def run_engine(batch):
            return state.embedder.embed(batch)

        def on_batch(n):
            metrics.batch.observe(n)
            metrics.images.inc(n)

        state.batcher = MicroBatcher(
            run_engine,
            max_batch=settings.max_batch,
            max_delay_s=settings.max_delay_ms / 1000.0,
            max_queue=settings.max_queue,
            on_batch=on_batch,
        )
        state.batcher.start()
        threading.Thread(target=load_and_warm, name="model-loader", daemon=True).start()
        yield
        await state.batcher.stop()

    app = FastAPI(title="servelab embedding service", version=servelab.__version__, lifespan=lifespan)
    app.state.servelab = state
    app.state.metrics = metrics

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError):
        return JSONResponse({"error": {"code": exc.code, "message": exc.message}}, status_code=exc.status, headers=exc.headers)

    @app.middleware("http")
    async def _observe(request: Request, call_next):
        t0 = time.perf_counter()
        response = await call_next(request)
        endpoint = request.url.path
        if endpoint.startswith("/embed"):
            metrics.latency.labels(endpoint).observe(time.perf_counter() - t0)
        metrics.requests.labels(endpoint, str(response.status_code)).inc()
        response.headers["X-Servelab-Weights"] = state.weights
        return response

    def refuse(reason: str, status: int, message: str, headers=None):
        metrics.rejections.labels(reason).inc()
        raise ApiError(status, reason, message, headers)

    def check_ready():
        if state.load_error:
            refuse("model_failed", 503, f"model failed to load: {state.load_error}")
        if not state.ready:
            refuse("warming_up", 503, "model is loading / warming up; retry shortly", {"Retry-After": "1"})

    def check_count(n: int):
        if n == 0:
            refuse("empty", 400, "no images in request")
        if n > settings.max_images_per_request:
            refuse("too_many_images", 413, f"{n} images in one request; the maximum is {settings.max_images_per_request}")

    def decode_all(blobs: list[bytes]) -> np.ndarray:
        out = np.empty((len(blobs), *INPUT_SHAPE), dtype=np.float32)
        for i, blob in enumerate(blobs):
            try:
                out[i] = preprocess_bytes(blob, max_bytes=settings.max_bytes, max_pixels=settings.max_pixels)
            except ImageDecodeError as exc:
                raise ApiError(_DECODE_STATUS.get(exc.kind, 400), exc.kind, f"image {i}: {exc}") from None
        return out

    async def embed_blobs(blobs: list[bytes], request: Request) -> Response:
        check_count(len(blobs))
        check_ready()
        try:
            batch = await asyncio.to_thread(decode_all, blobs)
        except ApiError as exc:
            metrics.rejections.labels(exc.code).inc()
            raise
        return await run_batch(batch, request)

    async def run_batch(batch: np.ndarray, request: Request) -> Response:
        metrics.queue.set(state.batcher.depth)
        try:
            emb = await state.batcher.submit(batch)
        except QueueFull as exc:
            refuse("queue_full", 503, str(exc), {"Retry-After": "1"})
        finally:
            metrics.queue.set(state.batcher.depth)
        return embedding_response(emb, request)

    def embedding_response(emb: np.ndarray, request: Request) -> Response:
        headers = {"X-Shape": f"{emb.shape[0]},{emb.shape[1]}", "X-Servelab-Engine": state.embedder.engine}
        if BINARY_TYPE in request.headers.get("accept", ""):
            return Response(np.ascontiguousarray(emb, dtype="<f4").tobytes(), media_type=BINARY_TYPE, headers=headers)
        return JSONResponse(
            {
                "embeddings": emb.tolist(),
                "count": int(emb.shape[0]),
                "dim": int(emb.shape[1]),
                "model": settings.model_name,
                "engine": state.embedder.engine,
                "weights": state.weights,
            },
            headers=headers,
        )

    def content_type(request: Request) -> str:
        return request.headers.get("content-type", "").split(";")[0].strip().lower()

    @app.post("/embed")
    async def embed(request: Request):
        """Multipart image files (any field name), or one raw image/jpeg|png|webp body."""
        ctype = content_type(request)
        if ctype == "multipart/form-data":
            try:
                form = await request.form(max_files=settings.max_images_per_request + 1, max_part_size=settings.max_bytes + 1)
            except Exception as exc:
                if "too many files" in str(exc).lower():  # the parser stops counting at max_files
                    refuse("too_many_images", 413, f"more than {settings.max_images_per_request} images in one request; "
                                                   f"the maximum is {settings.max_images_per_request}")
                refuse("bad_multipart", 400, f"could not parse multipart body: {exc}")
            files = [v for _, v in form.multi_items() if hasattr(v, "read")]
            if not files:
                refuse("empty", 400, "multipart body has no file parts")
            check_count(len(files))
            blobs = [await f.read() for f in files]
            return await embed_blobs(blobs, request)
        if ctype in IMAGE_TYPES:
            body = await request.body()
            if not body:
                refuse("empty", 400, "empty body: send image bytes")
            return await embed_blobs([body], request)
        refuse(
            "unsupported_media_type", 415,
            f"content type {ctype or '(none)'!r} not supported; send multipart/form-data files or image/jpeg, image/png, image/webp",
        )

    @app.post("/embed/base64")
    async def embed_base64(request: Request):
        """JSON {"images": ["<base64>", ...]}."""
        body = await request.body()
        if not body:
            refuse("empty", 400, 'empty body: send JSON {"images": ["<base64>", ...]}')
        try:
            import json

            doc = json.loads(body)
        except ValueError as exc:
            refuse("bad_json", 400, f"body is not valid JSON: {exc}")
        if not isinstance(doc, dict) or not isinstance(doc.get("images"), list) or not all(isinstance(s, str) for s in doc["images"]):
            refuse("bad_schema", 422, 'expected JSON {"images": ["<base64>", ...]} (a list of base64 strings)')
        check_count(len(doc["images"]))
        blobs = []
        for i, s in enumerate(doc["images"]):
            if s.startswith("data:") and "," in s:
                s = s.split(",", 1)[1]
            try:
                blobs.append(base64.b64decode(s, validate=True))
            except (binascii.Error, ValueError):
                refuse("bad_base64", 400, f"image {i}: malformed base64")
        return await embed_blobs(blobs, request)

    @app.post("/embed/tensor")
    async def embed_tensor(request: Request):
        """Raw little-endian float32 NCHW bytes; header X-Shape: N,3,224,224 (X-Dtype: float32)."""
        ctype = content_type(request)
        if ctype != BINARY_TYPE:
            refuse("unsupported_media_type", 415, f"content type {ctype or '(none)'!r}; send {BINARY_TYPE}")
        dtype = request.headers.get("x-dtype", "float32").lower()
        if dtype != "float32":
            refuse("bad_dtype", 400, f"dtype {dtype!r} not supported; send float32")
        raw_shape = request.headers.get("x-shape")
        if not raw_shape:
            refuse("missing_shape", 400, "header X-Shape (e.g. 4,3,224,224) is required")
        try:
            shape = tuple(int(x) for x in raw_shape.split(","))
        except ValueError:
            refuse("bad_shape", 400, f"X-Shape {raw_shape!r} is not a comma-separated list of integers")
        if len(shape) != 4 or shape[1:] != INPUT_SHAPE or shape[0] < 0:
            refuse("bad_shape", 400, f"shape {list(shape)} must be [N, 3, 224, 224]")
        check_count(shape[0])
        body = await request.body()
        expected = int(np.prod(shape)) * 4
        if len(body) != expected:
            refuse("bad_byte_count", 400, f"{len(body)} bytes received; shape {list(shape)} float32 needs {expected}")
        check_ready()
        batch = np.frombuffer(body, dtype="<f4").reshape(shape).astype(np.float32, copy=True)
        if not np.isfinite(batch).all():
            refuse("non_finite", 400, "tensor contains NaN or infinity")
        return await run_batch(batch, request)

    @app.get("/healthz")
    async def healthz():
        if state.load_error:
            return JSONResponse({"status": "error", "error": state.load_error}, status_code=500)
        return {"status": "alive", "uptime_s": round(time.time() - state.started, 1)}

    @app.get("/readyz")
    async def readyz():
        body = {"ready": state.ready, "weights": state.weights}
        if state.load_error:
            body["error"] = state.load_error
        return JSONResponse(body, status_code=200 if state.ready else 503)

    @app.get("/info")
    async def info():
        import fastapi
        import onnxruntime

        return {
            "service": "servelab",
            "version": servelab.__version__,
            "model": settings.model_name,
            "embedding_dim": EMBED_DIM,
            "weights": state.weights,
            "engine": state.embedder.info() if state.embedder else {"engine": settings.engine, "loaded": False},
            "ready": state.ready,
            "limits": {
                "max_batch": settings.max_batch,
                "max_delay_ms": settings.max_delay_ms,
                "max_queue": settings.max_queue,
                "max_images_per_request": settings.max_images_per_request,
                "max_bytes": settings.max_bytes,
                "max_pixels": settings.max_pixels,
            },
            "versions": {
                "python": platform.python_version(),
                "fastapi": fastapi.__version__,
                "onnxruntime": onnxruntime.__version__,
                "numpy": np.__version__,
            },
        }

    @app.get("/metrics")
    async def prometheus_metrics():
        metrics.queue.set(state.batcher.depth if state.batcher else 0)
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return app
