"""The machinery every loop shares: the sample store (`Recorder`), a pool of workers that can pause, warm-up,
windows sized by the work, and the meters measured beside them.

Windows are sized by the work, not the clock: after a warm-up that lasts until every worker has had an answer
and the latency of successive slices has stopped moving, each window lasts at least `min_p50s` × the p50
latency and `min_requests` completions, and windows repeat until the last `stable_windows` (three unless a profile
says otherwise) agree within `tolerance` (perf_analyzer's rule) or `max_windows` is reached; `stable` says which.
Windows start and end on completion events, so a window holds whole requests.

*Meters* are the hook for figures measured beside the load (e.g. the load generator's own CPU use): objects
with `start()` and `stop() -> dict`; each is started when measuring begins and stopped when it ends, and its
dict is merged into `LoadResult.summary()` (and so into the record).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

import numpy as np

from servelab.bench.load.options import LoadOpts, LoadResult, Work
from servelab.bench.load.stats import is_stable, latency_summary
from servelab.errors import InvalidValue

COLS = ("t_sched", "t_start", "t_end", "images", "ok")


class Recorder:
    """Every request's (t_sched, t_start, t_end, images, ok), one append-only list per worker (no lock needed).

    Counting completions (`completed()`, `last_end()`) reads list lengths and last items only; arrays are built
    once per window (`since(marks)`), never on a polling tick.
    """

    def __init__(self, workers: int):
        self.rows: list[list[tuple]] = [[] for _ in range(workers)]
        self.errors: list[str] = []

    def add(self, i: int, t_sched: float, t_start: float, t_end: float, images: int, ok: bool,
            error: BaseException | None = None) -> None:
        if error is not None and len(self.errors) < 20:
            self.errors.append(f"{type(error).__name__}: {error}"[:300])
        self.rows[i].append((t_sched, t_start, t_end, images, 1 if ok else 0))

    def marks(self) -> list[int]:
        return [len(r) for r in self.rows]

    def completed(self, marks: list[int] | None = None) -> int:
        n = sum(len(r) for r in self.rows)
        return n - (sum(marks) if marks else 0)

    def workers_done_since(self, marks: list[int]) -> int:
        """How many workers have completed at least one request since `marks`."""
        return sum(1 for r, m in zip(self.rows, marks, strict=False) if len(r) > m)

    def last_end(self) -> float | None:
        ends = [r[-1][2] for r in self.rows if r]
        return max(ends) if ends else None

    def since(self, marks: list[int] | None = None) -> np.ndarray:
        rows = [x for k, r in enumerate(self.rows) for x in r[(marks[k] if marks else 0):len(r)]]
        return np.asarray(rows, dtype=np.float64) if rows else np.zeros((0, 5))


def window_stats(arr: np.ndarray, t0: float, t1: float, right_closed: bool = True) -> dict:
    """Throughput and p50 of the successful requests that completed in (t0, t1] (or [t0, t1))."""
    if arr.size:
        inside = (arr[:, 2] > t0) & (arr[:, 2] <= t1) if right_closed else (arr[:, 2] >= t0) & (arr[:, 2] < t1)
        sel = arr[inside & (arr[:, 4] > 0)]
        errs = int((inside & (arr[:, 4] == 0)).sum())
    else:
        sel, errs = arr, 0
    lat = (sel[:, 2] - sel[:, 1]) if sel.size else []
    imgs = int(sel[:, 3].sum()) if sel.size else 0
    return {"throughput_img_s": imgs / (t1 - t0) if t1 > t0 else 0.0,
            "latency_p50_ms": latency_summary(lat)["latency_p50_ms"], "requests": len(lat), "errors": errs,
            "images": imgs, "t0": t0, "t1": t1}


def split_work(made):
    if isinstance(made, tuple):
        return made[0], made[1]
    return made, getattr(made, "close", lambda: None)


# --- a pool of workers that can pause -----------------------------------------------------------------

class Pool:
    """`concurrency` workers sending back to back while resumed; `pause()` returns once none is in flight."""

    def __init__(self, factory: Callable[[int], object], concurrency: int, name: str = "load"):
        if concurrency < 1:
            raise InvalidValue("concurrency must be >= 1")
        self.concurrency = concurrency
        self.made = [split_work(factory(i)) for i in range(concurrency)]
        self.rec = Recorder(concurrency)
        self._go, self._stop = threading.Event(), threading.Event()
        self._busy = [False] * concurrency
        self.threads = [threading.Thread(target=self._loop, args=(i, w), daemon=True, name=f"{name}-{i}")
                        for i, (w, _) in enumerate(self.made)]
        for t in self.threads:
            t.start()

    def _loop(self, i: int, work: Work) -> None:
        while True:
            self._go.wait()
            if self._stop.is_set():
                return
            self._busy[i] = True
            if not self._go.is_set():
                self._busy[i] = False
                continue
            t0 = time.perf_counter()
            try:
                n, err = int(work()), None
            except Exception as exc:  # counted, never hidden
                n, err = 0, exc
            self.rec.add(i, t0, t0, time.perf_counter(), n, err is None, err)
            self._busy[i] = False

    def resume(self) -> None:
        self._go.set()

    def pause(self) -> None:
        self._go.clear()
        while any(self._busy):
            time.sleep(0.001)

    def close(self) -> None:
        self._stop.set()
        self._go.set()
        for t in self.threads:
            t.join()
        for _, close in self.made:
            try:
                close()
            except Exception:
                pass


def warm_up(pool: Pool, opts: LoadOpts) -> float:
    """Run until every worker has had an answer, `warmup_s` has passed and the queue is steady (the p50 of
    successive slices of completions agrees within 2 × tolerance); returns the p50 estimate (seconds)."""
    t0 = time.perf_counter()
    cap = t0 + opts.max_warmup_s
    start = pool.rec.marks()
    while time.perf_counter() < cap:
        if pool.rec.workers_done_since(start) >= pool.concurrency and time.perf_counter() - t0 >= opts.warmup_s:
            break
        time.sleep(0.002)
    slice_n = max(pool.concurrency, 4)
    medians: list[float] = []
    if opts.quick:  # a smoke run: one answer per worker is warm enough; the p50 estimate comes from those
        arr = pool.rec.since(start)
        ok = arr[arr[:, 4] > 0] if arr.size else arr
        return float(np.median(ok[:, 2] - ok[:, 1])) if ok.size else 0.0
    while True:
        marks = pool.rec.marks()
        while pool.rec.completed(marks) < slice_n and time.perf_counter() < cap:
            time.sleep(0.002)
        arr = pool.rec.since(marks)
        ok = arr[arr[:, 4] > 0] if arr.size else arr
        medians.append(float(np.median(ok[:, 2] - ok[:, 1])) if ok.size else float("nan"))
        if time.perf_counter() >= cap:
            break
        if len(medians) >= 2 and is_stable(medians[-2:], 2 * opts.tolerance, 2):
            break
    good = [m for m in medians if np.isfinite(m)]
    return good[-1] if good else 0.0


def rewarm(pool: Pool, opts: LoadOpts) -> None:
    """After a resume: every worker completes one request before the window opens (the queue refills)."""
    marks, cap = pool.rec.marks(), time.perf_counter() + opts.max_warmup_s
    while pool.rec.workers_done_since(marks) < pool.concurrency and time.perf_counter() < cap:
        time.sleep(0.002)


def one_window(pool: Pool, opts: LoadOpts, p50_s: float, since: list[int]) -> dict:
    """One window from the latest completion, long enough for the work; stats over whole requests."""
    w_start = pool.rec.last_end() or time.perf_counter()
    n0 = pool.rec.completed()
    length = max(opts.min_window_s, opts.min_p50s * p50_s)
    while True:
        now = time.perf_counter()
        if now - w_start > opts.max_window_s:
            break
        if (pool.rec.last_end() or 0.0) >= w_start + length and pool.rec.completed() - n0 >= opts.min_requests:
            break  # the window closes on a completion at or past its length
        time.sleep(min(0.005, max(0.0005, (w_start + length - now) / 4)))
    w_end = pool.rec.last_end() or time.perf_counter()
    if w_end <= w_start:
        w_end = time.perf_counter()
    return window_stats(pool.rec.since(since), w_start, w_end)


def settled(windows: list[dict], opts: LoadOpts) -> bool:
    thr = [w["throughput_img_s"] for w in windows]
    p50 = [w["latency_p50_ms"] if w["latency_p50_ms"] is not None else float("nan") for w in windows]
    return is_stable(thr, opts.tolerance, opts.stable_windows) and is_stable(p50, opts.tolerance, opts.stable_windows)


def pool_result(pool: Pool, windows: list[dict], stable: bool, opts: LoadOpts, warmup_s: float,
            meters: dict) -> LoadResult:
    used = windows[-opts.stable_windows:] if stable else windows
    arr = pool.rec.since()
    if used:
        parts = [(arr[:, 2] > w["t0"]) & (arr[:, 2] <= w["t1"]) for w in used]
        inside = np.logical_or.reduce(parts) if arr.size else np.zeros(0, dtype=bool)
        measured = sum(w["t1"] - w["t0"] for w in used)
    else:
        inside, measured = np.zeros(len(arr), dtype=bool), 0.0
    sel = arr[inside] if arr.size else arr
    ok = sel[sel[:, 4] > 0] if sel.size else sel
    return LoadResult(
        mode="closed", concurrency=pool.concurrency, rate_rps=None,
        latencies_s=ok[:, 2] - ok[:, 1] if ok.size else np.zeros(0), images=int(ok[:, 3].sum()) if ok.size else 0,
        requests=len(ok), errors=int((sel[:, 4] == 0).sum()) if sel.size else 0, measured_s=measured,
        windows=[{k: v for k, v in w.items() if k not in ("t0", "t1")} for w in used], windows_used=len(windows),
        stable=stable, sent_total=len(arr), ok_total=int(arr[:, 4].sum()) if arr.size else 0,
        images_total=int(arr[:, 3].sum()) if arr.size else 0, error_examples=list(pool.rec.errors),
        warmup_s=warmup_s, quick=opts.quick, meters=meters,
    )


def start_meters(meters: Sequence) -> None:
    for m in meters:
        m.start()


def stop_meters(meters: Sequence) -> dict:
    out: dict = {}
    for m in meters:
        out.update(m.stop() or {})
    return out
