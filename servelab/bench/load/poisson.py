"""Open loop: Poisson arrivals at a set rate; latency runs from the scheduled arrival (no coordinated omission).

    open_loop(factory, rate_rps, duration_s=…, …) -> LoadResult
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

import numpy as np

from servelab.bench.load.options import LoadResult, Work
from servelab.bench.load.stats import is_stable
from servelab.bench.load.windows import Recorder, split_work, start_meters, stop_meters, window_stats
from servelab.errors import InvalidValue


def poisson_schedule(rate_rps: float, duration_s: float, seed: int | None = None) -> np.ndarray:
    """Arrival offsets (seconds) of a Poisson process at `rate_rps` within [0, duration_s)."""
    if rate_rps <= 0:
        raise InvalidValue("rate must be > 0 requests/s")
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
    max_duration_s: float | None = None,
    warmup_s: float = 1.0,
    max_workers: int = 32,
    seed: int | None = 0,
    window_s: float = 1.0,
    tolerance: float = 0.1,
    late_tolerance_s: float = 0.005,
    drop_after_s: float | None = None,
    quick: bool = False,
    meters: Sequence = (),
    progress: bool = False,
    desc: str = "open-loop",
) -> LoadResult:
    """Poisson arrivals at `rate_rps` for `duration_s` after `warmup_s`, served by up to `max_workers` workers.

    Windows of `window_s` are measured for `duration_s`, then repeated (the arrivals go on) until the throughput
    of the last three agrees within `tolerance` or `max_duration_s` is reached; `stable` says which.

    Latency runs from the *scheduled* arrival, so a server that falls behind is charged for the wait (no
    coordinated omission). Starts later than `late_tolerance_s` count as late; arrivals that could not start
    within `drop_after_s` are dropped and counted; arrivals still waiting at the end are the backlog. When the
    backlog grows, `rate_held` is False and the throughput is what was completed — never the offered rate.
    """
    from tqdm.auto import tqdm

    n_windows = max(1, int(round(duration_s / window_s)))
    window_len = duration_s / n_windows
    max_windows = max(n_windows, int(round((max_duration_s or duration_s) / window_len)))
    arrivals = poisson_schedule(rate_rps, warmup_s + max_windows * window_len, seed)
    made = [split_work(factory(i)) for i in range(max_workers)]
    rec = Recorder(max_workers)
    stop = threading.Event()
    lock = threading.Lock()
    nxt = [0]
    dropped_at: list[float] = []
    started = [0]  # requests handed to a worker's client (in flight or done)

    def run(i: int, work: Work):
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
                dropped_at.append(t_sched)
                continue
            with lock:
                started[0] += 1
            try:
                n, err = int(work()), None
            except Exception as exc:
                n, err = 0, exc
            rec.add(i, t_sched, t_start, time.perf_counter(), n, err is None, err)

    threads = [threading.Thread(target=run, args=(i, w), daemon=True, name=f"open-{i}")
               for i, (w, _) in enumerate(made)]
    t_base = time.perf_counter() + 0.05
    for t in threads:
        t.start()
    m0 = t_base + warmup_s
    backlog_by_window: list[int] = []
    window_thr: list[float] = []
    bar = tqdm(total=max_windows, desc=desc, unit="win", disable=not progress, leave=False)
    measured: dict = {}
    try:
        time.sleep(max(0.0, m0 - time.perf_counter()))
        start_meters(meters)
        for k in range(max_windows):
            w_end = m0 + (k + 1) * window_len
            time.sleep(max(0.0, w_end - time.perf_counter()))
            due = int(np.searchsorted(arrivals, w_end - t_base))
            backlog_by_window.append(max(0, due - started[0] - len(dropped_at)))
            window_thr.append(window_stats(rec.since(), w_end - window_len, w_end,
                                            right_closed=False)["throughput_img_s"])
            bar.update(1)
            if k + 1 >= n_windows and (k + 1 >= max_windows or is_stable(window_thr, tolerance, min(3, k + 1))):
                break
        measured = stop_meters(meters)
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
    arr = rec.since()
    # the span actually measured: duration_s, or more windows when they had not agreed yet
    measured_windows = len(backlog_by_window) or 1
    measured_s = measured_windows * window_len
    m1 = m0 + measured_s
    due_total = int(np.searchsorted(arrivals, m1 - t_base))
    backlog = max(0, due_total - started[0] - len(dropped_at))
    # throughput and latency: what completed inside the measured span (the server's real pace);
    # late starts: requests started inside it more than late_tolerance_s after their scheduled arrival
    sel = arr[(arr[:, 1] >= m0) & (arr[:, 1] < m1)] if arr.size else arr
    done = arr[(arr[:, 2] >= m0) & (arr[:, 2] < m1)] if arr.size else arr
    ok = done[done[:, 4] > 0] if done.size else done
    offered = int(((arrivals >= warmup_s) & (arrivals < warmup_s + measured_s)).sum())
    edges = np.linspace(m0, m1, measured_windows + 1)
    windows = [window_stats(arr, a, b, right_closed=False) for a, b in zip(edges[:-1], edges[1:], strict=False)]
    thr = [w["throughput_img_s"] for w in windows]
    return LoadResult(
        mode="open", concurrency=None, rate_rps=rate_rps,
        latencies_s=ok[:, 2] - ok[:, 0] if ok.size else np.zeros(0), images=int(ok[:, 3].sum()) if ok.size else 0,
        requests=len(ok), errors=int((done[:, 4] == 0).sum()) if done.size else 0,
        measured_s=measured_s, windows=[{k: v for k, v in w.items() if k not in ("t0", "t1")} for w in windows],
        windows_used=len(windows), stable=is_stable(thr, tolerance, min(3, len(thr))) if thr else False,
        sent_total=len(arr), ok_total=int(arr[:, 4].sum()) if arr.size else 0,
        images_total=int(arr[:, 3].sum()) if arr.size else 0, error_examples=list(rec.errors),
        warmup_s=warmup_s, quick=quick, meters=measured,
        offered=offered, late_starts=int((sel[:, 1] - sel[:, 0] > late_tolerance_s).sum()) if sel.size else 0,
        dropped=sum(1 for t in dropped_at if m0 <= t < m1), backlog=backlog, backlog_by_window=backlog_by_window,
        service_latencies_s=ok[:, 2] - ok[:, 1] if ok.size else np.zeros(0),
    )

