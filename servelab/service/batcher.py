"""Server-side micro-batcher: concurrent requests share one engine call.

Requests wait at most `max_delay_s` after the first one arrives for others to join, up to `max_batch`
images. Requests already on their way (`expect()`: admitted, their bodies still being read or decoded) are
waited for a little longer, but never longer than a run's fixed cost (`RunCost`): a request not waited for runs
in the next batch, which costs at most one more fixed cost, while every moment of waiting leaves the engine
idle. On a GPU a batch costs nearly the same at any size, so the wait is long and batches fill; on a CPU, where
the cost grows with every image, it is short and the engine goes on with whoever is ready. The engine runs in
worker threads, never on the event loop: one batch at a time, or `parallel` side by side for an engine of
several instances (servelab.model.engines.EngineInstances). While every instance is busy, new requests
queue and form the next batch. The
queue is bounded in images: past `max_queue` a request is refused at once (`QueueFull`, the service answers
503 + Retry-After) instead of waiting behind an ever-growing line.
An engine that assembles batches on its own device (`run_parts`, the torch engine) is handed the requests as they
came, arrays and JPEG files alike: the batcher that cuts tensor batches also cuts the batches nvJPEG decodes, so
JPEG requests from many clients are decoded in one call, with no second queue, batcher or wait.
A request may carry a timeout: if it is still waiting when that passes, it leaves the queue
(`DeadlineExceeded`) and is never computed, because nobody would read the answer. One already handed to the
engine is finished: its answer is moments away.
"""

from __future__ import annotations

import asyncio
import collections
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from servelab.errors import ServelabError
from servelab.fingerprint import usable_cores


class QueueFull(ServelabError, RuntimeError):
    """No room in the queue for this request's images."""


class DeadlineExceeded(ServelabError, RuntimeError):
    """The request waited in the queue past its timeout and was dropped without being computed."""


@dataclass(eq=False)  # compared by identity: the queue removes exactly this request, never compares arrays
class _Item:
    batch: np.ndarray  # or, for an engine with `run_parts`, a request's JPEG files (counted with len() too)
    future: asyncio.Future
    taken: bool = False  # handed to the engine
    queued_at: float = 0.0  # perf_counter when queued, and when the engine took it, and how long its run took
    taken_at: float | None = None
    run_s: float | None = None


@dataclass(frozen=True)
class Computed:
    """A request's rows, and where its time went in the batcher: when the engine took it (perf_counter), how long
    it had queued until then, and how long its batch ran."""

    rows: np.ndarray
    taken_at: float
    queued_s: float
    run_s: float


class RunCost:
    """What a batch costs the engine, learnt from its runs: t(n) ≈ fixed + per_image × n, fitted over the batch
    sizes seen (each size's recent time). The fixed part is what running a request in a batch of its own adds."""

    def __init__(self, smoothing: float = 0.3):
        self.smoothing = smoothing
        self._by_size: dict[int, float] = {}
        self._runs_seen = 0
        # (runs seen when fitted, (slope, intercept, cheapest run)): the fit holds until the next run is observed
        self._fit: tuple[int, tuple[float, float, float]] | None = None

    def observe(self, n: int, seconds: float) -> None:
        old = self._by_size.get(n)
        self._by_size[n] = seconds if old is None else old + self.smoothing * (seconds - old)
        self._runs_seen += 1

    def _fitted(self) -> tuple[float, float, float] | None:
        """The least-squares line through the sizes seen, fitted once per run, not once per question: the batcher
        asks before cutting every batch, and a fit costs more than the rest of its loop."""
        runs, cached = self._runs_seen, self._fit
        if cached is not None and cached[0] == runs:
            return cached[1]
        seen = list(self._by_size.items())  # one snapshot: the service's loader thread adds the warm-up's runs
        if len(seen) < 2:
            return None
        # the least-squares line in closed form: a few sizes, so plain arithmetic (np.polyfit's SVD costs more
        # than a small batch's whole way through the batcher)
        n = len(seen)
        mean_x = sum(x for x, _ in seen) / n
        mean_y = sum(y for _, y in seen) / n
        sxx = sum((x - mean_x) ** 2 for x, _ in seen)
        slope = sum((x - mean_x) * (y - mean_y) for x, y in seen) / sxx
        fit = (slope, mean_y - slope * mean_x, min(y for _, y in seen))
        self._fit = (runs, fit)
        return fit

    def fixed_s(self) -> float:
        """The fitted fixed cost (least squares), within [0, the cheapest run]; with one size seen, all of that
        run's time, since nothing yet says how much of it grows with the batch."""
        fit = self._fitted()
        if fit is None:
            seen = list(self._by_size.values())
            return float(seen[0]) if seen else 0.0
        return min(max(fit[1], 0.0), fit[2])

    def batch_s(self, n: int) -> float:
        """The fitted time of a batch of `n` images (0 before any run; with one size seen, that run's time)."""
        fit = self._fitted()
        if fit is None:
            seen = list(self._by_size.values())
            return float(seen[0]) if seen else 0.0
        return max(fit[1] + fit[0] * n, 0.0)

    def as_dict(self) -> dict:
        """The fitted fixed cost and each batch size's recent time, in milliseconds (the service's /info)."""
        return {"fixed_cost_ms": round(self.fixed_s() * 1000, 2),
                "run_ms_by_batch": {n: round(t * 1000, 2) for n, t in sorted(list(self._by_size.items()))}}


def _copy_into(request: np.ndarray, rows: np.ndarray) -> None:
    np.copyto(rows, request)


class MicroBatcher:
    def __init__(
        self,
        fn: Callable[[np.ndarray], np.ndarray],
        *,
        max_batch: int = 16,
        max_delay_s: float = 0.002,
        max_queue: int = 64,
        on_batch: Callable[[int, float], None] | None = None,
        parallel: int = 1,
        teaches: Callable[[], bool] | None = None,
        into: Callable[[np.ndarray, np.ndarray], None] | None = None,
        run_parts: Callable[[list], list] | None = None,
    ):
        self.fn = fn
        # how a request's array is written into its rows of the batch (float32): a copy, or, for a request sent as
        # uint8 pixels, the normalisation (the service's codecs.into_batch); it runs on the engine's thread
        self.into = into or _copy_into
        # an engine that assembles the batch itself, on its device (servelab.model.engines.TorchEmbedder.embed_parts):
        # it is handed the requests' payloads as they came (float32 or uint8 arrays, JPEG files to decode there) and
        # answers each one's rows, or the error of that request alone; no float32 batch is built on the host. Set
        # once the engine is built (the service's loader), like `parallel`
        self.run_parts = run_parts
        self._buffers: list[np.ndarray] = []  # float32 batches of max_batch rows, reused: no fresh pages per batch
        self._buffers_lock = threading.Lock()
        self.max_batch = max_batch
        self.max_delay_s = max_delay_s
        self.max_queue = max_queue
        self.on_batch = on_batch  # (images, seconds the run took) after each batch
        self.parallel = parallel  # batches the engine runs side by side (it may change once the engine is built)
        # called on the engine's thread right after a run: whether that run's time is the kind the hold is about
        # (None: every run is); an engine of instances runs a lone batch on all its cores, another engine
        self.teaches = teaches
        self._running = 0
        self._runs: set[asyncio.Task] = set()
        self._pending: collections.deque[_Item] = collections.deque()
        self._depth = 0  # images queued, not yet handed to the engine
        self._arriving = 0  # requests admitted and not yet submitted: they will be, moments from now
        self.cost = RunCost()  # the engine's fixed cost per batch: the most worth waiting for the arriving
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task | None = None
        self._executor = ThreadPoolExecutor(max_workers=max(parallel, usable_cores()), thread_name_prefix="engine")

    @property
    def depth(self) -> int:
        return self._depth

    def expect(self) -> Callable[[], None]:
        """A request on its way (admitted; its body still being read or decoded): until the function returned
        is called (when it is submitted, or gives up), a batch being cut waits for it too. Calling it again
        does nothing."""
        self._arriving += 1
        pending = True

        def arrived() -> None:
            nonlocal pending
            if pending:
                pending = False
                self._arriving -= 1
                if self._wake is not None:
                    self._wake.set()

        return arrived

    def start(self) -> None:
        self._wake = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._loop())

    async def stop(self) -> None:
        for task in (self._task, *self._runs):
            if task:
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    pass
        for item in self._pending:
            if not item.future.done():
                item.future.set_exception(RuntimeError("service is shutting down"))
        self._pending.clear()
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def submit(self, batch: np.ndarray, timeout_s: float | None = None) -> np.ndarray:
        """The engine's rows for `batch`; QueueFull at once when there is no room, DeadlineExceeded after
        `timeout_s` seconds still queued."""
        return (await self.submit_timed(batch, timeout_s)).rows

    async def submit_timed(self, batch: np.ndarray, timeout_s: float | None = None) -> Computed:
        """As `submit`, with how long the request queued and how long its batch ran (the service's Server-Timing)."""
        n = len(batch)  # an array's rows, or a request's JPEG files (servelab.model.gpu_decode.JpegImages)
        if self._depth + n > self.max_queue:
            raise QueueFull(f"queue full: {self._depth} images waiting, limit {self.max_queue}")
        loop = asyncio.get_running_loop()
        item = _Item(batch, loop.create_future(), queued_at=time.perf_counter())
        self._pending.append(item)
        self._depth += n
        self._wake.set()
        # one timer, not wait_for + shield (a task and two futures per request): at the deadline a request still
        # queued leaves the queue; one the engine has taken is finished, its answer moments away
        timer = loop.call_later(timeout_s, self._expire, item, n, timeout_s) if timeout_s is not None else None
        try:
            rows = await item.future
        finally:
            if timer is not None:
                timer.cancel()
        return Computed(rows, item.taken_at, item.taken_at - item.queued_at, item.run_s or 0.0)

    def _expire(self, item: _Item, n: int, timeout_s: float) -> None:
        if item.taken or item.future.done():
            return
        self._pending.remove(item)
        self._depth -= n
        item.future.set_exception(DeadlineExceeded(f"waited {timeout_s:.3g}s in the queue without reaching the engine"))

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if not self._pending or self._running >= self.parallel:  # nothing to run, or nowhere to run it
                self._wake.clear()
                await self._wake.wait()
                continue
            # Let a burst of concurrent requests arrive before cutting the batch, and the ones being decoded
            # finish, while waiting for them costs less than running them in a batch of their own would
            now = loop.time()
            deadline, hold = now + self.max_delay_s, now + self.cost.fixed_s()
            while self._queued_images() < self.max_batch:
                remaining = (max(deadline, hold) if self._arriving else deadline) - loop.time()
                if remaining <= 0:
                    break
                self._wake.clear()
                try:
                    async with asyncio.timeout(remaining):  # not wait_for: no task per wait on the event loop
                        await self._wake.wait()
                except TimeoutError:
                    break
            # with several instances free, the queue is shared out between them rather than all given to one
            free = self.parallel - self._running
            items = self._take(self.max_batch if free <= 1 else max(1, -(-self._queued_images() // free)))
            if items:
                self._running += 1
                run = loop.create_task(self._run(items))
                self._runs.add(run)
                run.add_done_callback(self._runs.discard)

    async def _run(self, items: list[_Item]) -> None:
        """One batch through the engine; every caller gets its own rows, or the engine's error."""
        size = sum(len(i.batch) for i in items)
        try:
            started = time.perf_counter()
            out, teaches = await asyncio.get_running_loop().run_in_executor(
                self._executor, self._assemble_and_run, [i.batch for i in items], size)
            seconds = time.perf_counter() - started
            if teaches:
                self.cost.observe(size, seconds)
        except Exception as exc:  # the engine failed: every caller in this batch hears why
            for it in items:
                if not it.future.done():
                    it.future.set_exception(exc)
            return
        finally:
            self._running -= 1
            self._wake.set()
        if self.on_batch:
            self.on_batch(size, seconds)
        for it, rows in zip(items, out, strict=True):
            it.run_s = seconds
            if it.future.done():
                continue
            if isinstance(rows, Exception):  # this request's own failure (an image that did not decode)
                it.future.set_exception(rows)
            else:
                it.future.set_result(rows)

    def _assemble_and_run(self, arrays: list, size: int) -> tuple[list, bool]:
        """On the engine's thread: each request's rows (or its own error), and whether the run teaches the cost.
        The requests are written into one float32 batch (a reused buffer of max_batch rows; a lone float32 request
        runs as it came), then the engine runs; or, with `run_parts`, the engine is handed them as they came.
        Building a batch of 16 tensors moves 10 MB: on the event loop that copy would hold up every other request's
        bytes."""
        if self.run_parts is not None:
            return self.run_parts(arrays), self.teaches is None or self.teaches()
        out, teaches = self._assemble(arrays, size)
        starts = np.cumsum([0, *(len(a) for a in arrays)])
        return [out[a:b] for a, b in zip(starts[:-1], starts[1:], strict=True)], teaches

    def _assemble(self, arrays: list[np.ndarray], size: int) -> tuple[np.ndarray, bool]:
        first = arrays[0]
        if len(arrays) == 1 and first.dtype == np.float32:
            return self.run_now(first)
        buffer = self._buffer(first.shape[1:]) if size <= self.max_batch else None
        batch = (buffer[:size] if buffer is not None else np.empty((size, *first.shape[1:]), dtype=np.float32))
        try:
            start = 0
            for a in arrays:
                self.into(a, batch[start:start + a.shape[0]])
                start += a.shape[0]
            out, teaches = self.run_now(batch)
            if buffer is not None and np.may_share_memory(out, buffer):  # rows that are a view of the buffer
                out = np.array(out)  # would change under their callers once the buffer is reused
            return out, teaches
        finally:
            if buffer is not None:
                with self._buffers_lock:
                    self._buffers.append(buffer)

    def _buffer(self, row_shape: tuple) -> np.ndarray:
        with self._buffers_lock:
            for i, b in enumerate(self._buffers):
                if b.shape[1:] == row_shape:
                    return self._buffers.pop(i)
        return np.empty((self.max_batch, *row_shape), dtype=np.float32)  # kept once this run gives it back

    def run_now(self, batch: np.ndarray) -> tuple[np.ndarray, bool]:
        """`batch` through the engine on this thread: its rows, and (asked on the same thread) whether this run
        teaches the cost. The batches use it, and so can a warm-up."""
        out = self.fn(batch)
        return out, self.teaches is None or self.teaches()

    def _queued_images(self) -> int:
        return sum(len(i.batch) for i in self._pending)

    def _take(self, limit: int) -> list[_Item]:
        """Whole requests, up to `limit` images (a single larger request goes alone)."""
        items: list[_Item] = []
        total = 0
        while self._pending:
            n = len(self._pending[0].batch)
            if items and total + n > min(limit, self.max_batch):
                break
            item = self._pending.popleft()
            item.taken, item.taken_at = True, time.perf_counter()
            items.append(item)
            total += n
        self._depth -= total
        return items
