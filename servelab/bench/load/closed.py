"""Load generation: closed loop (N workers back to back), interleaved A/B, and open loop (Poisson arrivals).

Public API (all a benchmark needs; everything else here is private):

    LoadOpts(min_requests=20, min_p50s=10, ...)    how a point is measured (LoadOpts.smoke(): tiny, not results)
    closed_loop(factory, concurrency, opts, meters=()) -> LoadResult
    interleaved(factory_a, factory_b, concurrency, opts, meters=()) -> ABResult   (A and B windows alternate)
    open_loop(factory, rate_rps, duration_s=…, …) -> LoadResult
    client_factory(make_client, blobs=… | tensor=…), embedder_factory(embedder, batch)
    Recorder — the one sample store of every loop

A *worker factory* `factory(i) -> work` (or `(work, close)`) builds one worker's request function in the calling
thread; `work()` sends one request and returns how many images it carried (raising on failure). Give every
worker its own client: clients hold one connection and are not thread-safe. Threads are enough: the time is
spent in sockets and in engines that release the GIL.

Windows are sized by the work, not the clock: after a warm-up that lasts until every worker has had an answer
and the latency of successive slices has stopped moving, each window lasts at least `min_p50s` × the p50
latency and `min_requests` completions, and windows repeat until the last `stable_windows` (three unless a profile says otherwise) agree within `tolerance`
(perf_analyzer's rule) or `max_windows` is reached; `stable` says which. Windows start and end on completion
events, so a window holds whole requests.

*Meters* are the hook for figures measured beside the load (e.g. the load generator's own CPU use): objects
with `start()` and `stop() -> dict`; each is started when measuring begins and stopped when it ends, and its
dict is merged into `LoadResult.summary()` (and so into the record).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from servelab.bench.stats import MIN_PAIRS_DIRECTION, is_stable, latency_summary, ratio_decided, relative_spread

Work = Callable[[], int]


@dataclass(frozen=True)
class LoadOpts:
    """How one point is measured. The defaults produce results; `LoadOpts.smoke()` checks that things run."""

    min_requests: int = 20       # completions per window
    min_p50s: float = 10.0       # a window lasts at least this many p50 latencies
    min_window_s: float = 0.0    # and at least this long
    max_window_s: float = 120.0  # cap on one window (a stalled server)
    warmup_s: float = 0.0        # least warm-up; it lasts until the queue is steady anyway
    max_warmup_s: float = 60.0
    tolerance: float = 0.1       # last `stable_windows` windows within ±tolerance of their mean
    stable_windows: int = 3
    max_windows: int = 8
    # an interleaved A/B measures at most this many window pairs (None: max_windows). A smoke run's single pair
    # checks every path of the comparison without the second pair's model reloads and warm-ups
    max_pairs: int | None = None
    # an interleaved A/B also stops once two or more pairs give its verdict (stats.ratio_decided)
    stop_when_decided: bool = True
    quick: bool = False          # a smoke run: its numbers are not results
    progress: bool = False

    @classmethod
    def smoke(cls, **kw) -> LoadOpts:
        """Seconds per point: tiny windows and a loose tolerance. Numbers measured with it are not results."""
        return cls(**{"min_requests": 1, "min_p50s": 1.0, "max_windows": 3, "tolerance": 0.5, "max_warmup_s": 10.0,
                      "quick": True, **kw})

    def as_params(self) -> dict:
        return {**asdict(self), "label": "quick" if self.quick else "full"}


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
    windows: list[dict]  # the reported windows (the last `stable_windows` when stable)
    windows_used: int    # every measured window
    stable: bool
    sent_total: int  # every request sent, warm-up included (matches a server's own counters)
    ok_total: int
    images_total: int
    error_examples: list[str] = field(default_factory=list)
    warmup_s: float | None = None
    quick: bool = False
    meters: dict = field(default_factory=dict)
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
        """The record fields this run measured (latency in ms, throughput in images/s, window min–max)."""
        thr = [w["throughput_img_s"] for w in self.windows]
        p50 = [w["latency_p50_ms"] for w in self.windows if w["latency_p50_ms"] is not None]
        out = {
            **latency_summary(self.latencies_s),
            "throughput_img_s": round(self.throughput_img_s, 4),
            "throughput_min_img_s": round(min(thr), 4) if thr else None,
            "throughput_max_img_s": round(max(thr), 4) if thr else None,
            "latency_p50_min_ms": round(min(p50), 4) if p50 else None,
            "latency_p50_max_ms": round(max(p50), 4) if p50 else None,
            "request_rate_rps": round(self.request_rate_rps, 4),
            "requests": self.requests,
            "images": self.images,
            "errors": self.errors,
            "error_examples": self.error_examples[:3],
            "measured_s": round(self.measured_s, 3),
            "warmup_measured_s": None if self.warmup_s is None else round(self.warmup_s, 3),
            "windows_used": self.windows_used,
            "repeats": len(self.windows),
            "stable": self.stable,
            "quick": self.quick,
            "spread": None if relative_spread(thr) is None else round(relative_spread(thr), 4),
            "window_throughput_img_s": [round(t, 3) for t in thr],
            "window_latency_p50_ms": [round(x, 3) for x in p50],
            "sent_total": self.sent_total,
            "ok_total": self.ok_total,
            **self.meters,
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


# --- the sample recorder ---------------------------------------------------------------------------

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


def _window_stats(arr: np.ndarray, t0: float, t1: float, right_closed: bool = True) -> dict:
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


def _split(made):
    if isinstance(made, tuple):
        return made[0], made[1]
    return made, getattr(made, "close", lambda: None)


# --- closed loop: a pool of workers that can pause ----------------------------------------------------

class _Pool:
    """`concurrency` workers sending back to back while resumed; `pause()` returns once none is in flight."""

    def __init__(self, factory: Callable[[int], object], concurrency: int, name: str = "load"):
        if concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        self.concurrency = concurrency
        self.made = [_split(factory(i)) for i in range(concurrency)]
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


def _warm_up(pool: _Pool, opts: LoadOpts) -> float:
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


def _rewarm(pool: _Pool, opts: LoadOpts) -> None:
    """After a resume: every worker completes one request before the window opens (the queue refills)."""
    marks, cap = pool.rec.marks(), time.perf_counter() + opts.max_warmup_s
    while pool.rec.workers_done_since(marks) < pool.concurrency and time.perf_counter() < cap:
        time.sleep(0.002)


def _one_window(pool: _Pool, opts: LoadOpts, p50_s: float, since: list[int]) -> dict:
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
    return _window_stats(pool.rec.since(since), w_start, w_end)


def _settled(windows: list[dict], opts: LoadOpts) -> bool:
    thr = [w["throughput_img_s"] for w in windows]
    p50 = [w["latency_p50_ms"] if w["latency_p50_ms"] is not None else float("nan") for w in windows]
    return is_stable(thr, opts.tolerance, opts.stable_windows) and is_stable(p50, opts.tolerance, opts.stable_windows)


def _result(pool: _Pool, windows: list[dict], stable: bool, opts: LoadOpts, warmup_s: float,
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


def _start(meters: Sequence) -> None:
    for m in meters:
        m.start()


def _stop(meters: Sequence) -> dict:
    out: dict = {}
    for m in meters:
        out.update(m.stop() or {})
    return out


def closed_loop(factory: Callable[[int], object], concurrency: int = 1, opts: LoadOpts | None = None, *,
                meters: Sequence = (), desc: str = "closed-loop") -> LoadResult:
    """`concurrency` workers send back-to-back requests: warm-up, then windows sized by the work until the last
    `stable_windows` agree within `tolerance` or `max_windows` were measured (see the module docstring)."""
    from tqdm.auto import tqdm

    opts = opts or LoadOpts()
    pool = _Pool(factory, concurrency)
    windows: list[dict] = []
    stable = False
    try:
        pool.resume()
        t0 = time.perf_counter()
        p50 = _warm_up(pool, opts)
        warm = time.perf_counter() - t0
        since = pool.rec.marks()
        _start(meters)
        bar = tqdm(total=opts.max_windows, desc=desc, unit="win", disable=not opts.progress, leave=False)
        for _ in range(opts.max_windows):
            windows.append(_one_window(pool, opts, p50, since))
            if windows[-1]["latency_p50_ms"]:
                p50 = windows[-1]["latency_p50_ms"] / 1000.0
            bar.update(1)
            if _settled(windows, opts):
                stable = True
                break
        bar.close()
        measured = _stop(meters)
        pool.pause()
    finally:
        pool.close()
    return _result(pool, windows, stable, opts, warm, measured)


# --- interleaved A/B -----------------------------------------------------------------------------

@dataclass
class ABResult:
    """Two sides measured in alternating windows (A B B A A B …) and their ratio A ÷ B with its spread."""

    a: LoadResult
    b: LoadResult
    ratio: float | None            # throughput A ÷ B: geometric mean of the reported pairs' ratios
    ratio_min: float | None        # min / max of the per-pair ratios
    ratio_max: float | None
    latency_ratio: float | None    # p50 A ÷ B
    pairs: int
    stable: bool
    quick: bool = False
    settled_by: str | None = None  # "agreement" (the last pairs agree) | "verdict" (the answer was known) | None

    def summary(self) -> dict:
        return {"ratio": None if self.ratio is None else round(self.ratio, 4),
                "ratio_min": None if self.ratio_min is None else round(self.ratio_min, 4),
                "ratio_max": None if self.ratio_max is None else round(self.ratio_max, 4),
                "latency_p50_ratio": None if self.latency_ratio is None else round(self.latency_ratio, 4),
                "pairs": self.pairs, "stable": self.stable, "settled_by": self.settled_by, "quick": self.quick}


def interleaved(factory_a: Callable[[int], object], factory_b: Callable[[int], object], concurrency: int = 1,
                opts: LoadOpts | None = None, *, concurrency_b: int | None = None, meters: Sequence = (),
                on_window: Callable[[int, str], None] | None = None, reconfigures: bool = False,
                desc: str = "a/b") -> ABResult:
    """Alternate windows of A and B in one sequence (ABBA order, so a linear drift cancels) until the last
    `stable_windows` pair ratios agree within `tolerance`, or (`stop_when_decided`) two or more pairs already give
    the verdict more pairs would (every pair ratio past the ranking margin on one side, or well inside it), or
    `max_pairs` (default `max_windows`) pairs were measured.

    Only one side runs at a time: the other's workers are paused with nothing in flight, and each window opens
    after every worker of its side has had an answer (the server's queue refills). The ratio is A's throughput
    over B's in each reported pair (geometric mean over the pairs); ratio_min / ratio_max are the extremes of the
    per-pair ratios.
    `on_window(side, "warm-up" | "start" | "end")` (side 0 = A, 1 = B) is called while both sides are idle, before
    a side's warm-up, before each of its windows and after it: the place to read a server's counters per side.
    When the "start" call returns True (it reconfigured the server, e.g. reloaded a model), that side warms up
    in full again before its window instead of only refilling the queue. With `reconfigures` (on_window switches
    one server between the two sides' configurations) B warms up only there, before its first window: warming it
    beforehand would load B's configuration just to load A's for A's first window (not with `meters`, which must
    not count a warm-up).
    """
    opts = opts or LoadOpts()
    pools = (_Pool(factory_a, concurrency, "load-a"), _Pool(factory_b, concurrency_b or concurrency, "load-b"))
    wins: tuple[list[dict], list[dict]] = ([], [])
    ratios: list[float] = []
    lat_ratios: list[float] = []
    warm = [0.0, 0.0]
    warmed = [False, False]
    p50 = [0.0, 0.0]
    try:
        # B warms up first and A last, so A, measured first, is still warm when its window opens; where `on_window`
        # reconfigures one server per side, B warms up only before its own first window (see the docstring)
        defer_b = reconfigures and not meters
        for k in (0,) if defer_b else (1, 0):
            pool = pools[k]
            if on_window:
                on_window(k, "warm-up")
            t0 = time.perf_counter()
            pool.resume()
            p50[k] = _warm_up(pool, opts)
            pool.pause()
            warm[k], warmed[k] = time.perf_counter() - t0, True
        since = [p.rec.marks() for p in pools]
        _start(meters)
        stable, settled_by, agreed = False, None, None
        for n in range(opts.max_pairs or opts.max_windows):
            order = (0, 1) if n % 2 == 0 else (1, 0)
            for k in order:
                changed = on_window(k, "start") if on_window else None
                t0 = time.perf_counter()
                pools[k].resume()
                if changed or not warmed[k]:  # reconfigured for this side, or not warmed yet: until the queue is steady
                    p50[k] = _warm_up(pools[k], opts) or p50[k]
                    if not warmed[k]:
                        warm[k], warmed[k] = time.perf_counter() - t0, True
                else:
                    _rewarm(pools[k], opts)
                wins[k].append(_one_window(pools[k], opts, p50[k], since[k]))
                pools[k].pause()
                if on_window:
                    on_window(k, "end")
                if wins[k][-1]["latency_p50_ms"]:
                    p50[k] = wins[k][-1]["latency_p50_ms"] / 1000.0
            a, b = wins[0][-1], wins[1][-1]
            ratios.append(a["throughput_img_s"] / b["throughput_img_s"] if b["throughput_img_s"] else float("nan"))
            lat_ratios.append(a["latency_p50_ms"] / b["latency_p50_ms"]
                              if a["latency_p50_ms"] and b["latency_p50_ms"] else float("nan"))
            agreed = _agreeing_pairs(ratios, opts)
            if agreed:
                stable, settled_by = True, "agreement"
                break
            if opts.stop_when_decided and n % 2 == 1 and ratio_decided(ratios):  # whole ABBA blocks only
                stable, settled_by = True, "verdict"
                break
        measured = _stop(meters)
    finally:
        for p in pools:
            p.close()
    ra, rb = (_result(pools[k], wins[k], stable, opts, warm[k], measured) for k in (0, 1))
    last = agreed or opts.stable_windows
    used = ratios[-last:] if stable else ratios
    lat_used = [x for x in (lat_ratios[-last:] if stable else lat_ratios) if np.isfinite(x)]
    finite = [x for x in used if np.isfinite(x)]
    positive = [x for x in finite if x > 0]
    return ABResult(a=ra, b=rb,
                    # the pairs' geometric mean: each pair's two windows share their minutes, so its ratio is free
                    # of the machine's drift; pooling all of A's windows against all of B's is not, once their
                    # lengths differ (a batch-8 window lasts longer than a batch-1 one)
                    ratio=float(np.exp(np.mean(np.log(positive)))) if positive else None,
                    ratio_min=min(finite) if finite else None, ratio_max=max(finite) if finite else None,
                    latency_ratio=float(np.median(lat_used)) if lat_used else None,
                    pairs=len(ratios), stable=stable, quick=opts.quick, settled_by=settled_by)


def _agreeing_pairs(ratios: list[float], opts: LoadOpts) -> int | None:
    """How many of the last pair ratios settle the comparison by agreeing within the tolerance, or None. Pairs
    that agree on one side of 1 without deciding it (stats.ratio_decided) show a direction only once there are
    MIN_PAIRS_DIRECTION of them (stats.read_ratio): fewer would read as "too few pairs" in one run and as a
    direction in the next, so until then the agreement rule asks for more pairs."""
    k = opts.stable_windows
    if not is_stable(ratios, opts.tolerance, k):
        return None
    last = ratios[-k:]
    if k < MIN_PAIRS_DIRECTION and (min(last) > 1 or max(last) < 1) and not ratio_decided(last):
        k = MIN_PAIRS_DIRECTION
        if len(ratios) < k or not is_stable(ratios, opts.tolerance, k):
            return None
    return k


# --- open loop ----------------------------------------------------------------------------------

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
    made = [_split(factory(i)) for i in range(max_workers)]
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
        _start(meters)
        for k in range(max_windows):
            w_end = m0 + (k + 1) * window_len
            time.sleep(max(0.0, w_end - time.perf_counter()))
            due = int(np.searchsorted(arrivals, w_end - t_base))
            backlog_by_window.append(max(0, due - started[0] - len(dropped_at)))
            window_thr.append(_window_stats(rec.since(), w_end - window_len, w_end,
                                            right_closed=False)["throughput_img_s"])
            bar.update(1)
            if k + 1 >= n_windows and (k + 1 >= max_windows or is_stable(window_thr, tolerance, min(3, k + 1))):
                break
        measured = _stop(meters)
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
    windows = [_window_stats(arr, a, b, right_closed=False) for a, b in zip(edges[:-1], edges[1:], strict=False)]
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


# --- worker factories -----------------------------------------------------------------------------

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
