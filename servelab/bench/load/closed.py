"""Closed loop: N workers send back to back, windows sized by the work, until the last few agree.

    closed_loop(factory, concurrency, opts, meters=()) -> LoadResult

A *worker factory* `factory(i) -> work` (or `(work, close)`) builds one worker's request function in the calling
thread; `work()` sends one request and returns how many images it carried (raising on failure). Give every
worker its own client: clients hold one connection and are not thread-safe. Threads are enough: the time is
spent in sockets and in engines that release the GIL. How windows are sized: servelab.bench.load.windows.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from servelab.bench.load.options import LoadOpts, LoadResult
from servelab.bench.load.windows import Pool, one_window, pool_result, settled, start_meters, stop_meters, warm_up


def closed_loop(factory: Callable[[int], object], concurrency: int = 1, opts: LoadOpts | None = None, *,
                meters: Sequence = (), desc: str = "closed-loop") -> LoadResult:
    """`concurrency` workers send back-to-back requests: warm-up, then windows sized by the work until the last
    `stable_windows` agree within `tolerance` or `max_windows` were measured (see the module docstring)."""
    from tqdm.auto import tqdm

    opts = opts or LoadOpts()
    pool = Pool(factory, concurrency)
    windows: list[dict] = []
    stable = False
    try:
        pool.resume()
        t0 = time.perf_counter()
        p50 = warm_up(pool, opts)
        warm = time.perf_counter() - t0
        since = pool.rec.marks()
        start_meters(meters)
        bar = tqdm(total=opts.max_windows, desc=desc, unit="win", disable=not opts.progress, leave=False)
        for _ in range(opts.max_windows):
            windows.append(one_window(pool, opts, p50, since))
            if windows[-1]["latency_p50_ms"]:
                p50 = windows[-1]["latency_p50_ms"] / 1000.0
            bar.update(1)
            if settled(windows, opts):
                stable = True
                break
        bar.close()
        measured = stop_meters(meters)
        pool.pause()
    finally:
        pool.close()
    return pool_result(pool, windows, stable, opts, warm, measured)

