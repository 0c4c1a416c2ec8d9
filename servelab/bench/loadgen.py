"""Load generators: closed-loop (N workers, each with its own client) and open-loop (Poisson arrivals).

A *worker factory* `factory(i) -> work` (or `(work, close)`) builds one worker's request function in the
calling thread; `work()` sends one request and returns how many images it carried (raising on failure).
Give every worker its own InferenceClient: clients hold one connection and are not thread-safe. Threads
are enough here: the time is spent in sockets and in engines that release the GIL.

Closed loop: warm-up (excluded), then measurement windows until the last three agree within a tolerance
(perf_analyzer's rule) or a window cap is hit — the result says which (`stable`, `windows_used`). A fixed
request count can replace the windows.

Open loop: arrivals follow a Poisson process at the target rate (seeded, so a schedule is reproducible).
Latency runs from the *scheduled* arrival, so a server that falls behind is charged for the wait (no
coordinated omission). Starts later than `late_tolerance_s` are counted as late; arrivals that could not
start within `drop_after_s` are dropped and counted; arrivals still waiting when the run ends are the
backlog. When the backlog grows, `rate_held` is False and the throughput is what was completed — never the
offered rate.
"""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from servelab.bench.stats import is_stable, latency_summary, relative_spread

Work = Callable[[], int]


@dataclass
class LoadResult:
    mode: str  # closed | open
    concurrency: int | None
    rate_rps: float | None
    latencies_s: np.ndarray
    images: int  # measured (inside the reported windows)
    requests: int
    errors: int
    measured_s: float
    windows: list[dict]
    windows_used: int
    stable: bool
    sent_total: int  # every request sent, warm-up included (matches a server's own counters)
    ok_total: int
    images_total: int
    error_examples: list[str] = field(default_factory=list)
    # open loop only
    offered: int | None = None
    late_starts: int | None = None
    dropped: int | None = None
    backlog: int | None = None
    backlog_by_window: list[int] | None = None
    service_latencies_s: np.ndarray | None = None

    @property
    def throughput_img_s(self) -> float:
        return self.images / self.measured_s if self.measured_s > 0 else 0.0

    @property
    def request_rate_rps(self) -> float:
        return self.requests / self.measured_s if self.measured_s > 0 else 0.0

    @property
    def rate_held(self) -> bool | None:
        if self.mode != "open":
            return None
        return self.dropped == 0 and self.backlog <= max(2, 0.02 * (self.offered or 0))

    def summary(self) -> dict:
        """The record fields this run measured (latency in ms, throughput in images/s)."""
        thr = [w["throughput_img_s"] for w in self.windows]
        out = {
            **latency_summary(self.latencies_s),
            "throughput_img_s": round(self.throughput_img_s, 4),
            "request_rate_rps": round(self.request_rate_rps, 4),
            "requests": self.requests,
            "images": self.images,
            "errors": self.errors,
            "error_examples": self.error_examples[:3],
            "measured_s": round(self.measured_s, 3),
            "windows_used": self.windows_used,
            "repeats": len(self.windows),
            "stable": self.stable,
            "spread": None if relative_spread(thr) is None else round(relative_spread(thr), 4),
            "window_throughput_img_s": [round(t, 3) for t in thr],
            "sent_total": self.sent_total,
            "ok_total": self.ok_total,
        }
        if self.mode == "open":
            svc = latency_summary(self.service_latencies_s if self.service_latencies_s is not None else [])
            out.update(
                offered=self.offered,
                offered_rate_rps=round(self.offered / self.measured_s, 4) if self.measured_s else None,
                late_starts=self.late_starts,
                dropped=self.dropped,
                backlog=self.backlog,
                backlog_by_window=self.backlog_by_window,
                rate_held=self.rate_held,
                service_latency_p50_ms=svc["latency_p50_ms"],
                service_latency_p99_ms=svc["latency_p99_ms"],
            )
        return out


def _split(made):
    if isinstance(made, tuple):
        return made[0], made[1]
    return made, getattr(made, "close", lambda: None)


class _Samples:
    """Per-worker lists of (t_sched, t_start, t_end, images, ok); appends need no lock."""

    def __init__(self, n: int):
        self.per_worker: list[list[tuple]] = [[] for _ in range(n)]
        self.errors: list[str] = []

    def array(self) -> np.ndarray:
        rows = [r for lst in self.per_worker for r in list(lst)]
        if not rows:
            return np.zeros((0, 5))
        return np.asarray(rows, dtype=np.float64)


def _window_stats(arr: np.ndarray, t0: float, t1: float, right_closed: bool = True) -> dict:
    """Throughput and p50 of the successful requests that completed in (t0, t1] (or [t0, t1))."""
    if arr.size:
        inside = (arr[:, 2] > t0) & (arr[:, 2] <= t1) if right_closed else (arr[:, 2] >= t0) & (arr[:, 2] < t1)
        sel = arr[inside & (arr[:, 4] > 0)]
    else:
        sel = arr
    lat = (sel[:, 2] - sel[:, 1]) if sel.size else []
    imgs = int(sel[:, 3].sum()) if sel.size else 0
    return {"throughput_img_s": imgs / (t1 - t0) if t1 > t0 else 0.0,
            "latency_p50_ms": latency_summary(lat)["latency_p50_ms"], "requests": len(lat)}


def _last_completion(arr: np.ndarray, now: float) -> float:
    """The latest completion time at or before `now` (or `now` when nothing has completed)."""
    if not arr.size:
        return now
    done = arr[arr[:, 2] <= now, 2]
    return float(done.max()) if done.size else now


def _run_worker(work: Work, samples: list, stop: threading.Event, errors: list, counter):
    while not stop.is_set():
        t0 = time.perf_counter()
        try:
            n = int(work())
            ok = 1
        except Exception as exc:  # counted, never hidden
            n, ok = 0, 0
            if len(errors) < 20:
                errors.append(f"{type(exc).__name__}: {exc}"[:300])
        t1 = time.perf_counter()
        samples.append((t0, t0, t1, n, ok))
        next(counter)


def closed_loop(
    factory: Callable[[int], object],
    concurrency: int = 1,
    *,
    warmup_s: float = 1.0,
    window_s: float = 2.0,
    max_windows: int = 10,
    tolerance: float = 0.1,
    stable_windows: int = 3,
    requests: int | None = None,
    min_window_requests: int = 5,
    max_window_s: float = 120.0,
    progress: bool = True,
    desc: str = "closed-loop",
) -> LoadResult:
    """`concurrency` workers send back-to-back requests. Fixed `requests` count, or windows until stable.

    Warm-up lasts `warmup_s` and until every worker has completed a request (capped at `max_window_s`).
    A window lasts `window_s` and at least `min_window_requests` completions (capped at `max_window_s`).
    `windows_used` counts every measured window; the reported figures come from the last `stable_windows`
    when stable, else from all of them.
    """
    from tqdm.auto import tqdm

    if concurrency < 1:
        raise ValueError("concurrency must be >= 1")
    made = [_split(factory(i)) for i in range(concurrency)]
    samples = _Samples(concurrency)
    stop = threading.Event()
    counter = itertools.count()
    threads = [
        threading.Thread(target=_run_worker, args=(w, samples.per_worker[i], stop, samples.errors, counter), daemon=True,
                         name=f"load-{i}")
        for i, (w, _) in enumerate(made)
    ]
    for t in threads:
        t.start()
    windows: list[dict] = []
    stable = False
    try:
        time.sleep(max(warmup_s, 0.0))
        # warm-up also lasts until every worker has had one answer: at high concurrency the server's queue only
        # reaches its steady depth after that (capped at max_window_s)
        w_deadline = time.perf_counter() + max_window_s
        while warmup_s > 0 and time.perf_counter() < w_deadline:
            if sum(1 for lst in samples.per_worker if lst) >= concurrency:
                break
            time.sleep(0.005)
        # windows start and end on completion events, so a window holds whole requests and its throughput
        # has no edge quantisation (5 vs 6 batches in a window would otherwise be a 20 % swing)
        m0 = _last_completion(samples.array(), time.perf_counter())
        if requests is not None:
            bar = tqdm(total=requests, desc=desc, unit="req", disable=not progress, leave=False)
            while True:
                arr = samples.array()
                n = int(((arr[:, 2] > m0).sum()) if arr.size else 0)
                bar.n = min(n, requests)
                bar.refresh()
                if n >= requests:
                    break
                time.sleep(0.005)
            bar.close()
            arr = samples.array()
            ends = np.sort(arr[arr[:, 2] > m0][:, 2])[:requests]
            m1 = float(ends[-1])
            cuts = [m0] + [float(ends[min(len(ends) - 1, (len(ends) * k) // 3 - 1)]) for k in (1, 2, 3)]
            windows = [_window_stats(arr, a, b) for a, b in zip(cuts[:-1], cuts[1:]) if b > a]
            stable = is_stable([w["throughput_img_s"] for w in windows], tolerance, stable_windows)
            report = (m0, m1)
        else:
            bar = tqdm(total=max_windows, desc=desc, unit="win", disable=not progress, leave=False)
            spans: list[tuple[float, float]] = []
            w_start = m0
            for k in range(max_windows):
                time.sleep(max(0.0, w_start + window_s - time.perf_counter()))
                # a window lasts window_s and at least `min_window_requests` completions (slow requests)
                while True:
                    now = time.perf_counter()
                    arr = samples.array()
                    n = int(((arr[:, 2] > w_start) & (arr[:, 2] <= now)).sum()) if arr.size else 0
                    if n >= min_window_requests or now - w_start > max_window_s:
                        break
                    time.sleep(0.005)
                w_end = _last_completion(arr, now) if n else now
                if w_end <= w_start:
                    w_end = now
                windows.append(_window_stats(arr, w_start, w_end))
                spans.append((w_start, w_end))
                w_start = w_end
                bar.update(1)
                bar.set_postfix(img_s=f"{windows[-1]['throughput_img_s']:.1f}")
                thr = [w["throughput_img_s"] for w in windows]
                p50 = [w["latency_p50_ms"] if w["latency_p50_ms"] is not None else float("nan") for w in windows]
                if is_stable(thr, tolerance, stable_windows) and is_stable(p50, tolerance, stable_windows):
                    stable = True
                    break
            bar.close()
            used = windows[-stable_windows:] if stable else windows
            report = (spans[-len(used)][0], spans[-1][1])
            windows = used
    finally:
        stop.set()
        for t in threads:
            t.join()
        for _, close in made:
            try:
                close()
            except Exception:
                pass
    arr = samples.array()
    r0, r1 = report
    n_windows = 1 if requests is not None else len(spans)
    sel = arr[(arr[:, 2] > r0) & (arr[:, 2] <= r1)]
    ok = sel[sel[:, 4] > 0]
    return LoadResult(
        mode="closed", concurrency=concurrency, rate_rps=None,
        latencies_s=ok[:, 2] - ok[:, 1], images=int(ok[:, 3].sum()), requests=len(ok), errors=int((sel[:, 4] == 0).sum()),
        measured_s=r1 - r0, windows=windows, windows_used=n_windows, stable=stable,
        sent_total=len(arr), ok_total=int(arr[:, 4].sum()) if arr.size else 0,
        images_total=int(arr[:, 3].sum()) if arr.size else 0, error_examples=list(samples.errors),
    )


def poisson_schedule(rate_rps: float, duration_s: float, seed: int | None = None) -> np.ndarray:
    """Arrival offsets (seconds) of a Poisson process at `rate_rps` within [0, duration_s)."""
    if rate_rps <= 0:
        raise ValueError("rate must be > 0 requests/s")
    rng = np.random.default_rng(seed)
    n = int(rate_rps * duration_s * 1.5 + 20)
    t = np.cumsum(rng.exponential(1.0 / rate_rps, n))
    while t[-1] < duration_s:  # rare: draw more
        t = np.concatenate([t, t[-1] + np.cumsum(rng.exponential(1.0 / rate_rps, n))])
    return t[t < duration_s]


def open_loop(
    factory: Callable[[int], object],
    rate_rps: float,
    *,
    duration_s: float = 5.0,
    warmup_s: float = 1.0,
    max_workers: int = 32,
    seed: int | None = 0,
    window_s: float = 1.0,
    tolerance: float = 0.1,
    late_tolerance_s: float = 0.005,
    drop_after_s: float | None = None,
    progress: bool = True,
    desc: str = "open-loop",
) -> LoadResult:
    """Poisson arrivals at `rate_rps` for `duration_s` after `warmup_s`, served by up to `max_workers` workers."""
    from tqdm.auto import tqdm

    arrivals = poisson_schedule(rate_rps, warmup_s + duration_s, seed)
    made = [_split(factory(i)) for i in range(max_workers)]
    stop = threading.Event()
    lock = threading.Lock()
    nxt = [0]
    per_worker: list[list[tuple]] = [[] for _ in range(max_workers)]
    dropped_idx: list[float] = []
    errors: list[str] = []
    started = [0]  # requests handed to a worker's client (in flight or done)

    def run(i: int, work: Work, out: list):
        while True:
            with lock:
                k = nxt[0]
                if k >= len(arrivals) or stop.is_set():
                    return
                nxt[0] += 1
            t_sched = t_base + arrivals[k]
            delay = t_sched - time.perf_counter()
            if delay > 0 and stop.wait(delay):
                return  # not started: owed, counted as backlog if it was due
            if stop.is_set():
                return
            t_start = time.perf_counter()
            if drop_after_s is not None and t_start - t_sched > drop_after_s:
                dropped_idx.append(t_sched)
                continue
            with lock:
                started[0] += 1
            try:
                n, ok = int(work()), 1
            except Exception as exc:
                n, ok = 0, 0
                if len(errors) < 20:
                    errors.append(f"{type(exc).__name__}: {exc}"[:300])
            out.append((t_sched, t_start, time.perf_counter(), n, ok))

    threads = [threading.Thread(target=run, args=(i, w, per_worker[i]), daemon=True, name=f"open-{i}")
               for i, (w, _) in enumerate(made)]
    t_base = time.perf_counter() + 0.05
    for t in threads:
        t.start()
    m0, m1 = t_base + warmup_s, t_base + warmup_s + duration_s
    backlog_by_window: list[int] = []
    n_windows = max(1, int(round(duration_s / window_s)))
    bar = tqdm(total=n_windows, desc=desc, unit="win", disable=not progress, leave=False)
    try:
        time.sleep(max(0.0, m0 - time.perf_counter()))
        for k in range(n_windows):
            w_end = m0 + (k + 1) * duration_s / n_windows
            time.sleep(max(0.0, w_end - time.perf_counter()))
            due = int(np.searchsorted(arrivals, w_end - t_base))
            backlog_by_window.append(max(0, due - started[0] - len(dropped_idx)))
            bar.update(1)
    finally:
        with lock:
            stop.set()
        for t in threads:
            t.join()
        bar.close()
        for _, close in made:
            try:
                close()
            except Exception:
                pass
    rows = [r for lst in per_worker for r in lst]
    arr = np.asarray(rows, dtype=np.float64) if rows else np.zeros((0, 5))
    due_total = int(np.searchsorted(arrivals, m1 - t_base))
    backlog = max(0, due_total - started[0] - len(dropped_idx))
    # throughput and latency: what completed inside the measured span (the server's real pace);
    # late starts: requests started inside it more than late_tolerance_s after their scheduled arrival
    sel = arr[(arr[:, 1] >= m0) & (arr[:, 1] < m1)] if arr.size else arr  # started inside the span
    done = arr[(arr[:, 2] >= m0) & (arr[:, 2] < m1)] if arr.size else arr
    ok = done[done[:, 4] > 0] if done.size else done
    offered = int(((arrivals >= warmup_s) & (arrivals < warmup_s + duration_s)).sum())
    edges = np.linspace(m0, m1, n_windows + 1)
    windows = [_window_stats(arr if arr.size else np.zeros((0, 5)), a, b, right_closed=False)
               for a, b in zip(edges[:-1], edges[1:])]
    thr = [w["throughput_img_s"] for w in windows]
    return LoadResult(
        mode="open", concurrency=None, rate_rps=rate_rps,
        latencies_s=ok[:, 2] - ok[:, 0], images=int(ok[:, 3].sum()) if ok.size else 0,
        requests=len(ok), errors=int((done[:, 4] == 0).sum()) if done.size else 0,
        measured_s=duration_s, windows=windows, windows_used=len(windows),
        stable=is_stable(thr, tolerance, min(3, len(thr))) if thr else False,
        sent_total=len(arr), ok_total=int(arr[:, 4].sum()) if arr.size else 0,
        images_total=int(arr[:, 3].sum()) if arr.size else 0, error_examples=errors,
        offered=offered, late_starts=int((sel[:, 1] - sel[:, 0] > late_tolerance_s).sum()) if sel.size else 0,
        dropped=sum(1 for t in dropped_idx if m0 <= t < m1), backlog=backlog, backlog_by_window=backlog_by_window,
        service_latencies_s=ok[:, 2] - ok[:, 1],
    )


# --- worker factories for InferenceClient backends ---------------------------------------------------

def client_factory(make_client: Callable[[], object], *, blobs: list[bytes] | None = None,
                   tensor: np.ndarray | None = None) -> Callable[[int], tuple]:
    """Worker factory: each worker gets its own client from `make_client()` and sends the same request.

    `blobs` (encoded images) go through `embed_images`, a `tensor` [N,3,224,224] through `embed_tensor`.
    """
    if (blobs is None) == (tensor is None):
        raise ValueError("give exactly one of blobs= or tensor=")

    def factory(i: int):
        client = make_client()
        if tensor is not None:
            n = int(tensor.shape[0])

            def work():
                client.embed_tensor(tensor)
                return n
        else:
            n = len(blobs)

            def work():
                client.embed_images(blobs)
                return n
        return work, client.close

    return factory


def embedder_factory(embedder, batch: np.ndarray) -> Callable[[int], Work]:
    """Worker factory around one in-process engine (raw compute, no serving layer)."""
    n = int(batch.shape[0])

    def factory(i: int):
        def work():
            embedder.embed(batch)
            return n
        return work

    return factory
