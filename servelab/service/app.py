"""FastAPI inference service: images (or ready tensors) in, L2-normalised 512-d embeddings out.

Read it top-down: the step every embedding route takes once the gate in front of the app has admitted the
request (`admitted`; the gate is `servelab.service.gate`, the rule `servelab.service.admission`), the work a
request does once admitted (`Job`: decode in the bounded pool, then the micro-batcher, against a
deadline), the routes (the embedding routes as plain ASGI routes, `Direct`, served straight from behind the gate by
`DirectRoutes`; the rest on `router`), the service
that owns the engine (`Service`), `create_app`, which wires them together, and `Observe`, which times and counts every request. Request bodies are
bounded in size and time by `servelab.service.bodies` and parsed by `servelab.service.codecs`; refusals come
from `servelab.service.errors`.

The model loads and warms up in a background thread after the server starts listening, so `/healthz`
answers at once and `/readyz` turns true only when a real batch has run. Decoding runs in a fixed pool of
worker threads and inference in the micro-batcher's engine thread: the event loop only moves bytes. Every
bad input gets a 4xx JSON body `{"error": {"code", "message"}}` naming the problem; an overloaded service
answers 503 with Retry-After before reading the body, a body over the size limit gets 413 before it is buffered,
and one that stalls gets 408, giving its slot back.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import platform
import threading
import time
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import NoReturn

import numpy as np
from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.datastructures import MutableHeaders
from starlette.routing import Match, Route

import servelab
from servelab.config import Settings
from servelab.errors import CannotRun
from servelab.fingerprint import machine
from servelab.model.contract import EMBED_DIM, INPUT_SHAPE
from servelab.model.preprocess import ImageDecodeError
from servelab.model.weights import weights_label
from servelab.service import codecs
from servelab.service.admission import Admission
from servelab.service.batcher import Computed, DeadlineExceeded, MicroBatcher, QueueFull
from servelab.service.bodies import BoundedBody, read_into
from servelab.service.errors import ApiError, reject, shed
from servelab.service.gate import WAIT_BOUND, Gate, answer, route_path
from servelab.service.metrics import GAUGE_REFRESH_S, UNMATCHED, Metrics

log = logging.getLogger("servelab.service")

router = APIRouter()

# the default wait budget's least: on a fast engine a full batch takes a few ms, which the decoding of one request's
# images or a busy event loop alone could pass
WAIT_FLOOR_S = 0.25
DEVICE = "device"  # Settings.decode's word for the engine's device


# --- admission: before any work ---------------------------------------------------------------------------

def service_of(request: Request) -> Service:
    return request.app.state.service


async def admitted(request: Request) -> AsyncIterator[Job]:
    """The admitted request's job. The gate (`servelab.service.gate.Gate`) refused or admitted it before its body
    was read, and holds its slot until the answer is done; it says whether the wait budget binds the request."""
    job = Job(service_of(request), wait_bound=request.scope.get(WAIT_BOUND, True))
    try:
        yield job
    finally:
        job.arrived()  # a job refused or failed before reaching the queue: batches stop waiting for it


class Job:
    """One admitted request: its deadlines, and the steps from image bytes to embeddings.

    The engine must take it before two bounds: the request timeout, counted from admission, and the wait budget
    (max_wait_ms), counted once its body is in, since reading it goes at the client's pace, not the server's; the
    budget binds only a request the gate's time bound admitted (`wait_bound`), not one of those it always admits.
    A request past either is dropped with 503 and never computed."""

    def __init__(self, svc: Service, wait_bound: bool = True):
        self.svc, self.limits, self.wait_bound = svc, svc.limits, wait_bound
        self.arrived = svc.batcher.expect()  # a batch being cut waits for this job until it is queued
        timeout = svc.settings.request_timeout_s
        self.deadline, self.bound = (time.perf_counter() + timeout, f"its {timeout:g}s timeout") if timeout > 0 \
            else (None, "")
        self.received_at: float | None = None
        self.computed: Computed | None = None

    def body_received(self) -> None:
        """Start the wait budget's clock (once): from here on the request waits for the server alone."""
        if self.received_at is not None:
            return
        self.received_at = now = time.perf_counter()
        budget_s = self.svc.admission.max_wait_s if self.wait_bound else 0.0
        if budget_s > 0 and (self.deadline is None or now + budget_s < self.deadline):
            self.deadline, self.bound = now + budget_s, f"the {budget_s * 1000:g} ms wait budget"

    def time_left(self) -> float | None:
        """Seconds until the deadline (None: no deadline); a job already past it is dropped here."""
        if self.deadline is None:
            return None
        left = self.deadline - time.perf_counter()
        if left <= 0:
            self.drop(f"spent {self.bound} before reaching the queue")
        return left

    def drop(self, why: str) -> NoReturn:
        shed("deadline_exceeded", f"request dropped without computing it: {why}", self.svc.admission.drain_s())

    async def embed_images(self, blobs: list[bytes]) -> np.ndarray:
        """Image files -> embeddings. With the decode on the device in force, a request of JPEG files the device reads
        as the CPU does (`codecs.device_jpegs`) is queued as its files: the micro-batcher cuts the batch as for
        tensors and the engine decodes every file of it in one batched nvJPEG call, so requests from many clients are
        decoded together with no second queue or batcher (a second batcher in front of the engine's would add its own
        wait to every request and split the engine's batch in two). Any other request is decoded in the pool."""
        self.body_received()
        codecs.check_count(len(blobs), self.limits)
        svc = self.svc
        if svc.decode_in_force == DEVICE and (jpegs := codecs.device_jpegs(blobs, self.limits)) is not None:
            svc.decoded[DEVICE] += len(blobs)
            return await self.embed_tensor(jpegs)
        svc.decoded["cpu"] += len(blobs)
        loop = asyncio.get_running_loop()
        # each image's format is checked before any is decoded, and the deadline before each one is
        batch = await loop.run_in_executor(self.svc.decode_pool, codecs.decode_images, blobs, self.limits,
                                           self.time_left)
        return await self.embed_tensor(batch)

    async def embed_tensor(self, batch) -> np.ndarray:
        """A float32 or uint8 array, or (decoded on the device) codecs.device_jpegs's files -> their embeddings."""
        svc = self.svc
        self.body_received()
        svc.admission.images(len(batch))
        try:
            timeout_s = self.time_left()
            self.arrived()  # nothing awaited between here and the queue: the batcher sees it queued, not gone
            self.computed = await svc.batcher.submit_timed(batch, timeout_s=timeout_s)
        except QueueFull as exc:
            shed("queue_full", str(exc), svc.admission.drain_s())
        except DeadlineExceeded as exc:
            self.drop(f"{exc} ({self.bound})")
        except ImageDecodeError as exc:  # a file the device could not decode: this request's alone
            codecs.refuse_image(exc)
        return self.computed.rows

    def server_timing(self) -> str:
        """The Server-Timing header: `wait` from the body's arrival until the engine took the request (decoding
        and queueing; what the wait budget bounds), `engine` the run of its batch, both in milliseconds."""
        c = self.computed
        return f"wait;dur={(c.taken_at - self.received_at) * 1000:.1f}, engine;dur={c.run_s * 1000:.1f}"

    def respond(self, emb: np.ndarray, request: Request) -> Response:
        svc = self.svc
        headers = {"X-Shape": f"{emb.shape[0]},{emb.shape[1]}", "X-Servelab-Engine": svc.embedder.engine,
                   "Server-Timing": self.server_timing()}
        if codecs.BINARY_TYPE in request.headers.get("accept", ""):
            return Response(np.ascontiguousarray(emb, dtype="<f4").tobytes(), media_type=codecs.BINARY_TYPE,
                            headers=headers)
        return JSONResponse({"embeddings": emb.tolist(), "count": int(emb.shape[0]), "dim": int(emb.shape[1]),
                             "model": svc.settings.model_name, "engine": svc.embedder.engine,
                             "weights": svc.weights}, headers=headers)


# --- routes ---------------------------------------------------------------------------------------------

async def embed(request: Request, job: Job) -> Response:
    """Multipart image files (any field name), or one raw image/jpeg|png|webp body."""
    ctype = codecs.media_type(request.headers.get("content-type"))
    if ctype == codecs.MULTIPART_TYPE:
        blobs = await codecs.multipart_images(request, job.limits)
    elif ctype in codecs.IMAGE_TYPES:
        blobs = codecs.raw_image(await request.body())
    else:
        reject(415, "unsupported_media_type", f"content type {ctype or '(none)'!r} not supported; send "
                                              "multipart/form-data files or image/jpeg, image/png, image/webp")
    return job.respond(await job.embed_images(blobs), request)


async def embed_base64(request: Request, job: Job) -> Response:
    """JSON {"images": ["<base64>", ...]}."""
    blobs = codecs.base64_images(await request.body(), job.limits)
    return job.respond(await job.embed_images(blobs), request)


async def embed_tensor(request: Request, job: Job) -> Response:
    """Raw little-endian NCHW bytes; header X-Shape: N,3,224,224; X-Dtype: float32 (default, normalised values) or
    uint8 (pixels, resized and cropped: the service normalises them)."""
    h = request.headers
    shape = codecs.tensor_shape(h.get("content-type"), h.get("x-shape"), h.get("x-dtype"), job.limits)
    dtype = codecs.tensor_dtype(h.get("x-dtype"))
    body, got = await read_into(request.receive, codecs.tensor_nbytes(shape, dtype))  # one copy, into place
    codecs.check_byte_count(got, shape, dtype)
    batch = codecs.tensor_from_bytes(body, shape, dtype)
    return job.respond(await job.embed_tensor(batch), request)


class Direct:
    """A route served as a plain ASGI app: the admission (`admitted`, entered as a context manager) and then the
    handler, without FastAPI's per-request work around them (the dependency solver and its exit stack, parameter
    validation, the response's serialisation), which took about as much of a tensor request's CPU as its handler
    did (a py-spy profile under wrk). The embedding routes, the hot path, are these; the others are FastAPI's."""

    def __init__(self, handle):
        self.handle = handle
        self._admitted = asynccontextmanager(admitted)

    async def __call__(self, scope, receive, send):
        request = Request(scope, receive, send)
        async with self._admitted(request) as job:
            response = await self.handle(request, job)
            await response(scope, receive, send)  # the slot is held until the answer is written


class DirectRoute(Route):
    """A POST route to a `Direct` handler that names itself in the scope, as FastAPI's routes do: `Observe` labels
    the metrics by this template, never by the raw path."""

    def __init__(self, path: str, handle):
        super().__init__(path, Direct(handle), methods=["POST"])

    def matches(self, scope):
        match, child_scope = super().matches(scope)
        if match is not Match.NONE:
            child_scope["route"] = self
        return match, child_scope


# the embedding routes; create_app puts them before FastAPI's, and DirectRoutes serves their POSTs
EMBED_ROUTES = [DirectRoute("/embed", embed), DirectRoute("/embed/base64", embed_base64),
                DirectRoute("/embed/tensor", embed_tensor)]


class DirectRoutes:
    """Behind the gate: a POST to an embedding route runs its `Direct` handler at once, inside the body's bounds
    (`BoundedBody`), and a refusal it raises (`ApiError`) is answered here as the app's exception handler answers
    one (counted, the same JSON body). Starlette's exception middleware, FastAPI's exit stack and the router's
    matching of every route in turn sat between the gate and the handler of every embedding request, doing
    nothing for it. Anything else goes on to the app (a GET to an embedding route is refused there, 405)."""

    def __init__(self, app, svc: Service, routes: list[DirectRoute]):
        self.app, self.svc = app, svc
        s = svc.settings
        self.routes = {r.path: (r, BoundedBody(r.app, max_bytes=s.max_body_bytes, timeout_s=s.body_timeout_s))
                       for r in routes}

    async def __call__(self, scope, receive, send):
        found = self.routes.get(route_path(scope)) if scope["type"] == "http" and scope["method"] == "POST" else None
        if found is None:
            return await self.app(scope, receive, send)
        route, bounded = found
        scope["route"] = route  # as the router names it: Observe labels the metrics by its template
        started = False

        async def answer_once(message):
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await bounded(scope, receive, answer_once)
        except ApiError as refusal:
            if started:  # the answer is on its way: nothing more can be said on this connection
                raise
            self.svc.metrics.rejections.labels(refusal.code).inc()
            await answer(refusal, send)


@router.get("/healthz")
async def healthz(request: Request):
    svc = service_of(request)
    if svc.load_error:
        return JSONResponse({"status": "error", "error": svc.load_error}, status_code=500)
    return {"status": "alive", "uptime_s": round(time.time() - svc.started, 1)}


@router.get("/readyz")
async def readyz(request: Request):
    svc = service_of(request)
    body = {"ready": svc.ready, "weights": svc.weights}
    if svc.load_error:
        body["error"] = svc.load_error
    return JSONResponse(body, status_code=200 if svc.ready else 503)


@router.get("/info")
async def info(request: Request):
    import fastapi
    import onnxruntime

    svc, s = service_of(request), service_of(request).settings
    return {
        "service": "servelab",
        "version": servelab.__version__,
        "machine": machine(),  # which machine answers: a client measuring it from elsewhere cannot know
        "process": {"pid": os.getpid(), "workers": s.workers},  # which of the frontend processes answered
        "model": s.model_name,
        "embedding_dim": EMBED_DIM,
        "weights": svc.weights,
        "engine": svc.embedder.info() if svc.embedder else {"engine": s.engine, "loaded": False},
        "ready": svc.ready,
        "batcher": svc.batcher.cost.as_dict() if svc.batcher else None,  # what a batch costs, and so its wait
        # where JPEG files are decoded: the setting, the place in force and why, and the images decoded each way
        "decode": {"setting": s.decode, "in_force": svc.decode_in_force, "why": svc.decode_why,
                   "images": dict(svc.decoded)},
        "limits": {
            "max_batch": s.max_batch,
            "max_delay_ms": s.max_delay_ms,
            "max_queue": s.max_queue,
            "max_in_flight": s.in_flight_limit,
            "decode_threads": s.decode_threads,
            "request_timeout_s": s.request_timeout_s,
            "max_wait_ms": round(svc.admission.max_wait_s * 1000, 1),  # the budget now (it follows the engine)
            "wait_budget": "auto" if s.max_wait_ms is None else "set",
            "always_admit": s.always_admit,
            "max_images_per_request": s.max_images_per_request,
            "max_bytes": s.max_bytes,
            "max_pixels": s.max_pixels,
            "max_body_bytes": s.max_body_bytes,
            "body_timeout_s": s.body_timeout_s,
        },
        "versions": {
            "python": platform.python_version(),
            "fastapi": fastapi.__version__,
            "onnxruntime": onnxruntime.__version__,
            "numpy": np.__version__,
        },
    }


@router.get("/metrics")
async def prometheus_metrics(request: Request):
    svc = service_of(request)
    svc.refresh_gauges()
    body, media_type = svc.metrics.exposition()
    return Response(body, media_type=media_type)


# --- the service: engine, batcher, decode pool, gate ------------------------------------------------------

class Service:
    """What the routes share: settings, the engine (once loaded), the micro-batcher, decode pool and gate."""

    def __init__(self, settings: Settings, embedder=None):
        self.settings = settings
        self.limits = codecs.Limits.from_settings(settings)
        self.metrics = Metrics(settings.metrics_run_dir)  # a worker of several: the run's shared folder
        self.admission = Admission(settings.in_flight_limit, max_wait_s=(settings.max_wait_ms or 0) / 1000.0,
                                   always_admit=settings.always_admit)
        self.decode_pool = ThreadPoolExecutor(settings.decode_threads, thread_name_prefix="decode")
        self.embedder = embedder
        self.ready = False
        self.load_error: str | None = None
        self.weights = weights_label(settings)
        self.batcher: MicroBatcher | None = None
        self.started = time.time()
        # where JPEG files are decoded, once the engine is built (`choose_decode`); until then nothing is decoded
        self.decode_in_force, self.decode_why = "cpu", "the engine is not built yet"
        self.decoded = {DEVICE: 0, "cpu": 0}  # images decoded on the engine's device and in the decode pool
        self._gauges: asyncio.Task | None = None  # a worker of several: the task writing its gauges

    def check_ready(self) -> None:
        if self.load_error:
            reject(503, "model_failed", f"model failed to load: {self.load_error}")
        if not self.ready:
            shed("warming_up", "model is loading / warming up; retry shortly", retry_after_s=1)

    def load_and_warm(self) -> None:
        """Build the engine (unless one was given) and run real batches through it; then /readyz is true."""
        try:
            t0 = time.perf_counter()
            if self.embedder is None:
                from servelab.model.engines import make_embedder

                self.embedder = make_embedder(self.settings, instances=self.settings.engine_instances)
            self.weights = self.embedder.weights
            # an engine that assembles batches on its device is handed the requests as they came
            self.batcher.run_parts = getattr(self.embedder, "embed_parts", None)
            self.decode_in_force, self.decode_why = self.choose_decode()
            self.batcher.parallel = getattr(self.embedder, "parallel_runs", 1)  # instances that run side by side
            # a lone batch runs on all cores and takes another time than an instance's: only instances' runs
            # teach the hold, and the engine says which way each one went
            self.batcher.teaches = getattr(self.embedder, "ran_on_an_instance", None)
            # warm up at the largest batch and at one image; where the last run of each teaches (one session: yes;
            # instances: no, a warm-up runs alone on all cores), it tells the batcher what a batch's fixed cost is,
            # so it knows from the first request how long a batch is worth holding (instances learn theirs from
            # their first batches side by side)
            for n in sorted({min(self.settings.max_batch, 16), 1}, reverse=True):
                dummy = np.zeros((n, *INPUT_SHAPE), dtype=np.float32)
                for _ in range(max(self.settings.warmup_iters, 1)):
                    started = time.perf_counter()
                    _, teaches = self.batcher.run_now(dummy)
                if teaches:
                    self.batcher.cost.observe(n, time.perf_counter() - started)
            self.admission.max_wait_s = self.wait_budget_s()  # from the warm-up's runs until batches teach it
            self.ready = True
            log.info("model ready in %.1fs: %s", time.perf_counter() - t0, self.embedder.info())
        except Exception as exc:  # keep serving /healthz so the reason is visible
            self.load_error = f"{type(exc).__name__}: {exc}"
            log.error("model failed to load: %s", self.load_error)

    def choose_decode(self) -> tuple[str, str]:
        """(where JPEG files are decoded, why) for the built engine and the `decode` setting; CannotRun where the
        setting asks for the device and the engine cannot decode there (the load fails, naming it)."""
        setting, emb = self.settings.decode, self.embedder
        if setting == "cpu":
            return "cpu", "the decode setting is cpu"
        if not hasattr(emb, "decode_error") or self.batcher.run_parts is None:
            if setting == DEVICE:
                raise CannotRun(f"decode on the device needs the torch engine; the engine is {emb.engine}")
            return "cpu", f"the {emb.engine} engine decodes nothing on its device"
        if setting == "auto" and not emb.on_gpu:
            return "cpu", f"the torch engine runs on {emb.device}: auto decodes on the device on cuda only"
        if (why := emb.decode_error()) is not None:
            if setting == DEVICE:
                raise CannotRun(f"decode on the device: {emb.decoder} cannot run here: {why}")
            return "cpu", f"{emb.decoder} cannot run here: {why}"
        return DEVICE, f"{emb.decoder}, batched per micro-batch; PNG, WebP and rotated, CMYK or progressive JPEGs on the CPU"

    def _run_engine(self, batch: np.ndarray) -> np.ndarray:
        return self.embedder.embed(batch)

    def _on_batch(self, n: int, seconds: float) -> None:
        self.metrics.batch.observe(n)
        self.metrics.images.inc(n)
        # instances side by side each take this long for their batch: together they go that many times faster
        self.admission.record(n, seconds / self.batcher.parallel)
        self.admission.max_wait_s = self.wait_budget_s()

    def wait_budget_s(self) -> float:
        """The wait budget: max_wait_ms where it is set; by default one full batch (max_batch images) at the
        engine's measured pace, at least WAIT_FLOOR_S, so the bound follows the machine: the gate then keeps about
        a batch of images inside past capacity. Never under two runs of one image, on an engine that slow; less
        would drop a lone request that arrives while another runs (0: no budget)."""
        setting, cost = self.settings.max_wait_ms, self.batcher.cost
        if setting == 0:
            return 0.0
        single = 2 * cost.batch_s(1)
        if setting is not None:
            return max(setting / 1000.0, single)
        pace, full = self.admission.images_per_s, self.settings.max_batch
        batch_s = full / pace if pace else cost.batch_s(full) / self.batcher.parallel  # before a batch: the warm-up's
        return max(batch_s, single, WAIT_FLOOR_S)

    def refresh_gauges(self) -> None:
        """The gauges as they are now: this process's queue and requests in flight."""
        self.metrics.queue.set(self.batcher.depth if self.batcher else 0)
        self.metrics.in_flight.set(self.admission.in_flight)

    async def _refresh_gauges_forever(self) -> None:
        # a worker of several: a scrape reaches one worker, which reads the others' gauges from their files
        while True:
            self.refresh_gauges()
            await asyncio.sleep(GAUGE_REFRESH_S)

    def start(self) -> None:
        s = self.settings
        self.batcher = MicroBatcher(self._run_engine, max_batch=s.max_batch, max_delay_s=s.max_delay_ms / 1000.0,
                                    max_queue=s.max_queue, on_batch=self._on_batch, into=codecs.into_batch)
        self.batcher.start()
        if self.metrics.shared_dir is not None:
            self._gauges = asyncio.get_running_loop().create_task(self._refresh_gauges_forever())
        threading.Thread(target=self.load_and_warm, name="model-loader", daemon=True).start()

    async def stop(self) -> None:
        if self._gauges is not None:
            self._gauges.cancel()
        await self.batcher.stop()
        self.decode_pool.shutdown(wait=False, cancel_futures=True)
        self.metrics.process_gone()


# --- the app ---------------------------------------------------------------------------------------------

# FastAPI's own OpenTelemetry hooks off (FastAPI 0.165 has them; older ones take no such argument): the service's
# metrics are its Prometheus ones, and with no provider configured the hooks still looked up the global providers
# on every request, on the event loop
_NO_NATIVE_TELEMETRY = ({"telemetry": {"tracing": False, "metrics": False, "logs": False}}
                        if "telemetry" in inspect.signature(FastAPI.__init__).parameters else {})


def create_app(settings: Settings | None = None, embedder=None) -> FastAPI:
    """The service as an ASGI app; `embedder` replaces the configured engine (any object with embed/info/engine/weights)."""
    svc = Service(settings or Settings.from_env(), embedder)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        svc.start()
        yield
        await svc.stop()

    app = FastAPI(title="servelab embedding service", version=servelab.__version__, lifespan=lifespan,
                  **_NO_NATIVE_TELEMETRY)
    app.state.service = svc
    app.include_router(router)
    app.router.routes[:0] = EMBED_ROUTES

    @app.exception_handler(ApiError)
    async def answer_refusal(request: Request, exc: ApiError):
        svc.metrics.rejections.labels(exc.code).inc()
        return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers)

    app.add_middleware(BoundedBody, max_bytes=svc.settings.max_body_bytes, timeout_s=svc.settings.body_timeout_s)
    app.add_middleware(DirectRoutes, svc=svc, routes=EMBED_ROUTES)  # the embedding routes' POSTs, bounded the same
    # outside the body's bounds, inside Observe: a refusal reads no body and is still timed and counted
    embedding = {r.path: r for r in EMBED_ROUTES}
    app.add_middleware(Gate, svc=svc, routes=embedding)
    app.add_middleware(Observe, svc=svc)
    return app


class Observe:
    """Times every request and counts it by route template and status; names the weights in every answer.

    A plain ASGI middleware: it only looks at the answer's first message. Starlette's `@app.middleware("http")`
    would also relay every chunk of the request body through a task group of its own, and a batch of eight
    tensors arrives in about 75 chunks."""

    def __init__(self, app, svc: Service):
        self.app, self.svc = app, svc

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        t0, status = time.perf_counter(), 500  # 500 unless an answer starts: the app raised

        async def observed(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                MutableHeaders(scope=message).append("X-Servelab-Weights", self.svc.weights)
            await send(message)

        try:
            await self.app(scope, receive, observed)
        finally:
            endpoint = getattr(scope.get("route"), "path", None) or UNMATCHED  # the template, never the raw path
            timed = time.perf_counter() - t0 if endpoint.startswith("/embed") else None
            self.svc.metrics.answered(endpoint, status, timed)
