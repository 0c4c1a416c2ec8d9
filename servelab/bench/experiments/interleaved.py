"""The interleaved A/B: two sides measured in alternating windows (A B B A …), so a machine's drift cancels in
their ratio, and the experiment that writes A's, B's and the ratio's records.

    ab(run, "04-batching", Side("batch 8", srv, "tensor", batch=8), Side("batch 1", srv, "tensor"), opts=opts)
    instances_ab(run, triton, instances=(2, 1), concurrency=8)   # two settings of one Triton model, reloaded

A `Side` is what one side measures (label, server, payload, batch, concurrency); `interleaved` is the loop
on two client factories, `ab` the experiment on two sides.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from servelab.bench.experiments.point import local_pid, merge_deltas, point_fields, quietly
from servelab.bench.load.idle import IdleSides
from servelab.bench.load.options import LoadOpts, LoadResult
from servelab.bench.load.stats import MIN_PAIRS_DIRECTION, is_stable, ratio_decided
from servelab.bench.load.windows import Pool, one_window, pool_result, rewarm, start_meters, stop_meters, warm_up
from servelab.bench.results.records import Run
from servelab.bench.servers.handle import Served
from servelab.bench.servers.triton_served import TritonServed
from servelab.errors import InvalidValue


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
    pools = (Pool(factory_a, concurrency, "load-a"), Pool(factory_b, concurrency_b or concurrency, "load-b"))
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
            p50[k] = warm_up(pool, opts)
            pool.pause()
            warm[k], warmed[k] = time.perf_counter() - t0, True
        since = [p.rec.marks() for p in pools]
        start_meters(meters)
        stable, settled_by, agreed = False, None, None
        for n in range(opts.max_pairs or opts.max_windows):
            order = (0, 1) if n % 2 == 0 else (1, 0)
            for k in order:
                changed = on_window(k, "start") if on_window else None
                t0 = time.perf_counter()
                pools[k].resume()
                if changed or not warmed[k]:  # reconfigured for this side, or not warmed yet: until the queue is steady
                    p50[k] = warm_up(pools[k], opts) or p50[k]
                    if not warmed[k]:
                        warm[k], warmed[k] = time.perf_counter() - t0, True
                else:
                    rewarm(pools[k], opts)
                wins[k].append(one_window(pools[k], opts, p50[k], since[k]))
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
        measured = stop_meters(meters)
    finally:
        for p in pools:
            p.close()
    ra, rb = (pool_result(pools[k], wins[k], stable, opts, warm[k], measured) for k in (0, 1))
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
    that agree on one side of 1 without deciding it (servelab.bench.load.stats.ratio_decided) show a direction only once there are
    MIN_PAIRS_DIRECTION of them (servelab.bench.report.verdicts.read_ratio): fewer would read as "too few pairs" in one run and as a
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


@dataclass(frozen=True)
class Side:
    """One side of an interleaved A/B: the name its records and the ratio give it, the server it measures, and
    what its clients send — `payload` (None: the server's own), `batch` images a request, `concurrency` clients.

        ab(run, "payload", Side("jpeg", srv.variant(payload="jpeg")), Side("tensor", srv), opts=opts)
    """

    label: str
    server: Served
    payload: str | None = None
    batch: int = 1
    concurrency: int = 1

    def __post_init__(self):
        if self.batch < 1 or self.concurrency < 1:
            raise InvalidValue(f"side {self.label!r}: batch and concurrency must be >= 1, got batch {self.batch}, "
                               f"concurrency {self.concurrency}")

    @property
    def sends(self) -> str:
        """The payload its clients send: its own, or else its server's."""
        return self.payload or self.server.payload


def ab(run: Run, experiment: str, a: Side, b: Side, *, opts: LoadOpts | None = None, params: dict | None = None,
       meters=(), prepare: Callable[[int], bool | None] | None = None, pause_idle: bool = True) -> list[dict]:
    """Interleaved A/B: windows of A and B alternate in one sequence; writes A's and B's records and an `ab`
    record (kind "ab": A ÷ B throughput, with the min–max of the per-pair ratios and whether they settled).

    When A and B are two live servers, the one waiting would take CPU from the one measured: each side's idle
    cost (`idle_cpu_pct`, % of one core, measured before the first window) goes into the records, and a side
    this machine started is stopped during the other side's warm-up and windows (servelab.bench.load.idle;
    `idle_side` says what was done, or why not; `pause_idle=False` only records the cost).

    Each side's server counters are read around each of its windows (while both sides are idle) and summed,
    so a server shared by A and B (same server, other payload or protocol) still gets per-side figures.
    `prepare(side)` (0 = A, 1 = B) runs before each of that side's windows while nothing is in flight: the
    place to switch one server between two configurations (e.g. batching on and off) so they interleave too;
    when it returns True (it changed something), the side warms up again before its window.
    """
    opts = opts or LoadOpts()
    sides, snaps, deltas = (a, b), [None, None], ([], [])

    def on_window(k: int, phase: str) -> bool:
        if phase in ("warm-up", "start"):
            idle.run_only(k)  # side k's server continues, the other's process group stops
        changed = bool(prepare(k)) if prepare and phase in ("warm-up", "start") else False
        if phase == "start":
            snaps[k] = quietly(sides[k].server.snapshot)
        elif phase == "end":
            deltas[k].append(sides[k].server.delta(snaps[k], quietly(sides[k].server.snapshot)))
        return changed

    with IdleSides([local_pid(a.server), local_pid(b.server)], [a.label, b.label], pause=pause_idle,
                   probe_s=0.25 if opts.quick else 2.0) as idle:
        res = interleaved(a.server.worker_factory(a.sends, a.batch), b.server.worker_factory(b.sends, b.batch),
                          a.concurrency, opts, concurrency_b=b.concurrency, meters=meters, on_window=on_window,
                          reconfigures=prepare is not None, desc=f"{experiment} {a.label} / {b.label}")
    extra = {"ab": {"pairs": res.pairs, "order": "ABBA", "a": a.label, "b": b.label}, **(params or {})}

    def side_record(k: int, result: LoadResult) -> dict:
        side = sides[k]
        return run.record(experiment, **point_fields(
            run, side.server, payload=side.sends, batch=side.batch, concurrency=side.concurrency, opts=opts,
            params={**extra, "side": ("a", "b")[k]}, stats=merge_deltas(deltas[k]), summary=result.summary()),
            **idle.record_fields(k))

    ra, rb = side_record(0, res.a), side_record(1, res.b)
    return [ra, rb, _ratio_record(run, experiment, a, b, res, ra, rb, opts, extra)]


def _ratio_record(run: Run, experiment: str, a: Side, b: Side, res: ABResult, ra: dict, rb: dict, opts: LoadOpts,
                  extra: dict) -> dict:
    """The `ab` record: the ratio A ÷ B and its spread, named by what both sides had in common."""
    s = res.summary()
    # what both sides had in common (the link, Triton's instances…) names the ratio's point too
    shared = {k: v for k, v in ra["params"].items() if k not in ("load", "side") and rb["params"].get(k, ...) == v}
    machines = [r["params"].get("served_by") for r in (ra, rb)]
    if "served_by" not in shared and all(machines):  # a ratio of two machines names both
        shared["served_by"] = f"A: {machines[0]}; B: {machines[1]}"

    def common(x, y):
        return x if x == y else None

    return run.record(experiment, kind="ab", server=f"{a.label} / {b.label}", ratio=s["ratio"],
                      ratio_min=s["ratio_min"], ratio_max=s["ratio_max"], latency_p50_ratio=s["latency_p50_ratio"],
                      stable=s["stable"], settled_by=s["settled_by"], repeats=s["pairs"], quick=s["quick"],
                      a=a.label, b=b.label,
                      engine=common(a.server.engine, b.server.engine),
                      protocol=common(a.server.protocol, b.server.protocol),
                      payload=common(a.sends, b.sends), batch=common(a.batch, b.batch),
                      concurrency=common(a.concurrency, b.concurrency),
                      params={**shared, "load": opts.as_params(), **extra},
                      idle_cpu_pct_a=ra["idle_cpu_pct"], idle_cpu_pct_b=rb["idle_cpu_pct"],
                      idle_paused_a=ra["idle_paused"], idle_paused_b=rb["idle_paused"],
                      idle_side_a=ra["idle_side"], idle_side_b=rb["idle_side"],
                      note="throughput A ÷ B, interleaved windows; min–max over the window pairs; idle_cpu_pct_a/_b: "
                           "% of one core each side used while idle, before the windows; idle_paused_a/_b, "
                           "idle_side_a/_b: whether each side was stopped during the other's windows, and how or why "
                           "not")


def queue_delays_ab(run: Run, triton: TritonServed, *, delays_us: tuple[int, int] = (4000, 0), concurrency: int = 8,
                    payload: str | None = None, opts: LoadOpts | None = None,
                    experiment: str = "queue-delay-ab") -> list[dict]:
    """Two queue delays of one Triton model in alternating windows at one concurrency (ratio A ÷ B), like
    `instances_ab`: a grid measures the delays minutes apart, so the machine's drift is in their ratio; here it
    cancels."""
    return _settings_ab(run, triton, "max_queue_delay_us", delays_us, [f"delay {d} µs" for d in delays_us],
                        concurrency=concurrency, payload=payload, opts=opts, experiment=experiment)


def instances_ab(run: Run, triton: TritonServed, *, instances: tuple[int, int] = (2, 1), concurrency: int = 8,
                 payload: str | None = None, opts: LoadOpts | None = None,
                 experiment: str = "instances-ab") -> list[dict]:
    """Two instance counts of one Triton model in alternating windows at one concurrency (ratio A ÷ B): the
    model is reloaded with A's or B's count when the side changes, and restored after. A sweep measures the
    counts minutes apart, so the machine's drift is in its ratio; here it cancels."""
    labels = [f"{n} instance{'' if n == 1 else 's'}" for n in instances]
    return _settings_ab(run, triton, "instances", instances, labels, concurrency=concurrency, payload=payload,
                        opts=opts, experiment=experiment)


def _settings_ab(run: Run, triton: TritonServed, setting: str, values: tuple[int, int], labels: list[str], *,
                 concurrency: int, payload: str | None, opts: LoadOpts | None, experiment: str) -> list[dict]:
    """`ab` of two values of one Triton setting (`instances` or `max_queue_delay_us`) on one model, reloaded with
    a side's value when the side changes and restored after; each side's records name its value."""
    from servelab.triton.control import config_switch, config_with

    sides = [Side(label, dataclasses.replace(triton, **{setting: int(v)}), payload, concurrency=concurrency)
             for label, v in zip(labels, values, strict=True)]
    configs = [config_with(triton.http_url, triton.model, **{setting: int(v)}) for v in values]
    with config_switch(triton.http_url, triton.model, configs) as use:
        return ab(run, experiment, *sides, opts=opts, prepare=use)
