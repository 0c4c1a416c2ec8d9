"""Two runs compared point by point and headline by headline: is the second a reproduction of the first?

Points are matched by what was measured (experiment, server, engine, protocol, payload, batch, concurrency, rate
— for an overload point, the multiple of its run's capacity — link, Triton instances / queue delay, A/B side; the
k-th repeat of a point in A with the k-th in B). For each metric the two runs have (throughput, p50 latency, an
interleaved A/B ratio) the difference is *within noise* when the two runs' window ranges overlap, or when it is no
larger than the noise: the larger recorded window spread (at least `min_noise`) and, for a throughput or latency
(measured minutes apart, unlike a ratio, whose sides interleave), the machine's own drift across the two runs — how
far the drift probe's measurements (servelab.bench.load.drift, taken before every notebook of a lab run) differed from
each other, 9 pairs in 10.

A shared machine can also be measurably faster in one run than in the other at the moment a point was taken (the
probes before and after it say by how much). An absolute figure that differs by more than the noise is still within
noise when B ÷ A lies within that noise of the span from 1 (no change) to the machine's own speed ratio (throughput
moves with it, latency against it): the machine explains the difference, the stack did not change. Where the
machine did not move, nothing changes. And a lab run measures some configurations more than once, minutes apart
(Triton's encoder at batch 1 and one client, in several notebooks): the spread of those measurements is how far
that very workload moved within one run, which the probe (another workload) can understate. An absolute figure is
also within noise when the two runs' ranges for its configuration overlap: the rule for window ranges, with the
run's other measurements of the configuration as further windows. The summary says how many points needed each
allowance. Runs without probes are judged on window spreads alone. A point is within noise when all its metrics
are. Headlines (see servelab.bench.report.headlines) are compared by the findings they state, matched by key:
the same reading and the same side ahead is the same conclusion; for one that differs, both runs' figures are
named and whether their ranges overlapped (the margin running through one figure) or not (the figure moved). A
headline recorded as text only (before headlines kept their findings) is not comparable and is left out. A run
reproduces another when at least `min_fraction` of the points are within noise and every comparable headline is
the same.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from servelab.bench.load.drift import drift, machine_speed, probe_values
from servelab.bench.report.headlines import NOT_COMPARABLE, compare_headlines, load_headlines
from servelab.bench.results.records import load_records, resolve_run_dir

KEY = ("experiment", "kind", "server", "backend", "engine", "provider", "protocol", "payload", "batch", "concurrency",
       "rate_rps")
KEY_PARAMS = ("instances", "max_queue_delay_us", "link", "side", "level")
KINDS = ("load", "raw", "cold-start", "ab")
# params that describe how or where a point was measured, not what was measured: two records that differ only in
# these (and in the experiment that took them) measured the same configuration
BOOKKEEPING_PARAMS = frozenset({"load", "served_by", "attached", "ab", "side", "device_source", "link_shaping"})
# metric, its window range (min and max fields, or else a list of per-window values)
METRICS = (
    ("throughput_img_s", ("throughput_min_img_s", "throughput_max_img_s"), "window_throughput_img_s"),
    ("latency_p50_ms", ("latency_p50_min_ms", "latency_p50_max_ms"), "window_latency_p50_ms"),
    ("ratio", ("ratio_min", "ratio_max"), None),  # an interleaved A/B record (kind "ab"): A ÷ B throughput
)


@dataclass
class Comparison:
    points: list[dict]
    headlines: list[dict]
    only_a: int
    only_b: int
    min_fraction: float
    machine_drift: float | None = None  # the drift probes' pairwise difference (9 in 10), both runs together
    probes: tuple[int, int] = (0, 0)     # probe measurements in A and in B

    @property
    def within_noise_as_measured(self) -> int:
        """Points within noise without allowing for the machine's speed at their moment, or for the spread of
        their configuration's other measurements in each run."""
        return sum(p["within_noise"] and not p["for_machine"] and not p["for_repeats"] for p in self.points)

    @property
    def within_noise_for_machine(self) -> int:
        """Points within noise only once the machine's speed at their moment is allowed for."""
        return sum(p["within_noise"] and p["for_machine"] for p in self.points)

    @property
    def within_noise_for_repeats(self) -> int:
        """Points within noise only once their configuration's other measurements in each run are allowed for (a
        point that needed both allowances counts for the machine, as its verdict says)."""
        return sum(p["within_noise"] and p["for_repeats"] and not p["for_machine"] for p in self.points)

    @property
    def within_noise(self) -> int:
        return sum(p["within_noise"] for p in self.points)

    @property
    def fraction_within_noise(self) -> float | None:
        return self.within_noise / len(self.points) if self.points else None

    @property
    def headlines_same(self) -> bool:
        """Every headline the two runs can compare concludes the same (a headline kept as text only is left out)."""
        return all(h["verdict"] in ("same", NOT_COMPARABLE) for h in self.headlines)

    @property
    def reproduced(self) -> bool:
        f = self.fraction_within_noise
        return f is not None and f >= self.min_fraction and self.headlines_same

    def summary(self) -> str:
        f = self.fraction_within_noise
        same = sum(h["verdict"] == "same" for h in self.headlines)
        text_only = sum(h["verdict"] == NOT_COMPARABLE for h in self.headlines)
        drift_note = ("no drift probe in " + ("either run" if not any(self.probes) else "one run")
                      + ": absolute figures judged on window spreads alone; "
                      if self.machine_drift is None else
                      f"9 of 10 pairs of drift-probe measurements differed by less than {100 * self.machine_drift:.0f} % ("
                      f"{self.probes[0]} + {self.probes[1]} measurements; absolute figures are judged within that); ")
        allowance = (f"{self.within_noise_as_measured} as measured, {self.within_noise_for_machine} more once the "
                     "machine's speed at their moment, as the probes measured it, is allowed for, "
                     f"{self.within_noise_for_repeats} more once the same configuration's other measurements in each "
                     "run are; " if self.machine_drift is not None else "")
        return (drift_note + f"{self.within_noise} of {len(self.points)} points within noise "
                f"({'n/a' if f is None else f'{100 * f:.0f} %'}; " + allowance
                + f"{self.only_a} only in A, {self.only_b} only in B); "
                f"{same} of {len(self.headlines) - text_only} headlines the same"
                + (f" ({text_only} not comparable: no verdict data, recorded as text only)" if text_only else "")
                + "; " + ("reproduced" if self.reproduced else
                          f"NOT reproduced (needs ≥ {100 * self.min_fraction:.0f} % of points within noise and every "
                          "comparable headline the same)"))


def point_key(r: dict) -> tuple:
    """What a point is matched by between runs. An open-loop point offered a multiple of the capacity its run
    measured (`servelab bench overload`) is matched by that multiple, `level`: its rate in requests/s differs
    from run to run with the capacity."""
    p = r.get("params") or {}
    relative = p.get("level") is not None
    return tuple(None if relative and k == "rate_rps" else r.get(k) for k in KEY) + tuple(
        str(p.get(k)) for k in KEY_PARAMS)


def config_key(r: dict) -> tuple:
    """What was measured, whichever experiment measured it: the point's fields but the experiment, and every
    parameter but the bookkeeping ones."""
    p = r.get("params") or {}
    return tuple(r.get(k) for k in KEY if k != "experiment") + tuple(
        sorted((k, json.dumps(v, sort_keys=True, default=str)) for k, v in p.items() if k not in BOOKKEEPING_PARAMS))


def repeat_ranges(recs: list[dict]) -> dict[int, dict[str, tuple[float, float]]]:
    """Record index -> {metric: (lowest, highest)}: for each load or raw point whose configuration these records
    measured more than once, in different experiments, that configuration's range of each absolute metric."""
    keys = {i: config_key(r) for i, r in enumerate(recs)
            if r.get("kind") in ("load", "raw") and r.get("available", True) is not False}
    # two records of one experiment with the same key measured two things whose difference only their labels hold
    # (the two sides of batching on ÷ off on one reloaded model): neither is a repeat of anything
    seen = defaultdict(int)
    for i, key in keys.items():
        seen[(recs[i].get("experiment"), key)] += 1
    members: dict[tuple, list[int]] = defaultdict(list)
    for i, key in keys.items():
        if seen[(recs[i].get("experiment"), key)] == 1:
            members[key].append(i)
    out: dict[int, dict[str, tuple[float, float]]] = {}
    for idx in members.values():
        if len(idx) < 2:
            continue
        ranges = {}
        for name in (m for m, _, _ in METRICS if m != "ratio"):
            values = [float(recs[i][name]) for i in idx if recs[i].get(name) is not None]
            if len(values) >= 2:
                ranges[name] = (min(values), max(values))
        out.update((i, ranges) for i in idx)
    return out


def point_label(r: dict) -> str:
    bits = [r.get("server"), r.get("engine"), r.get("protocol"), r.get("payload")]
    bits += [f"b={r['batch']}"] if r.get("batch") else []
    bits += [f"c={r['concurrency']}"] if r.get("concurrency") else []
    bits += [f"{r['rate_rps']}/s"] if r.get("rate_rps") else []
    p = r.get("params") or {}
    bits += [f"{k}={p[k]}" for k in KEY_PARAMS if p.get(k) is not None]
    return " ".join(str(x) for x in bits if x)


def _band(r: dict, fields: tuple, windows: str | None) -> tuple[float, float] | None:
    lo, hi = r.get(fields[0]), r.get(fields[1])
    if lo is None and windows:
        w = [x for x in (r.get(windows) or []) if x is not None]
        lo, hi = (min(w), max(w)) if len(w) >= 2 else (None, None)
    return (float(lo), float(hi)) if lo is not None and hi is not None else None


def _judge(va: float, vb: float, ba, bb, ra: dict, rb: dict, floor: list[float]) -> dict:
    # each run's relative window range for this metric; the record's throughput spread where none was kept
    spreads = [(b[1] - b[0]) / abs(v) if b else r.get("spread") for r, b, v in ((ra, ba, va), (rb, bb, vb))]
    spread = max([x for x in spreads if x is not None] + floor)
    rel = (vb - va) / abs(va)
    overlap = ba is not None and bb is not None and ba[0] <= bb[1] and bb[0] <= ba[1]
    return {"delta_pct": round(100 * rel, 2), "noise_pct": round(100 * spread, 2),
            "within_noise": bool(overlap or abs(rel) <= spread)}


def _metric(ra: dict, rb: dict, name: str, fields: tuple, windows: str | None, min_noise: float,
            machine_drift: float | None = None, faster: float | None = None,
            repeats: tuple[dict, dict] = ({}, {})) -> dict | None:
    """`faster`: how many times as fast the machine was in B as in A when the point was taken (from the probes);
    `repeats`: the two records' entries of their runs' `repeat_ranges`."""
    va, vb = ra.get(name), rb.get(name)
    if va is None or vb is None or va == 0:
        return None
    ba, bb = _band(ra, fields, windows), _band(rb, fields, windows)
    absolute = name != "ratio"
    out = {"A": va, "B": vb, **_judge(va, vb, ba, bb, ra, rb, [min_noise] + (
        [machine_drift] if machine_drift is not None and absolute else [])), "for_machine": False,
           "for_repeats": False}
    if out["within_noise"] or not absolute:
        return out
    if faster and machine_drift is not None and _explained_by_machine(name, va, vb, faster, out["noise_pct"] / 100):
        out.update(within_noise=True, for_machine=True)
        return out
    # the runs' other measurements of this configuration, where either run has some: do the two ranges overlap?
    reps = [rep.get(name) for rep in repeats]
    if any(reps):
        (la, ha), (lb, hb) = (rep or band or (v, v) for rep, band, v in zip(reps, (ba, bb), (va, vb), strict=True))
        if la <= hb and lb <= ha:
            out.update(within_noise=True, for_repeats=True, repeat_ranges=((la, ha), (lb, hb)))
    return out


def _explained_by_machine(name: str, va: float, vb: float, faster: float, noise: float) -> bool:
    # B ÷ A as the machine alone would have moved it: 1 (no change) up to the probes' speed ratio at that moment
    # (a faster machine: more img/s, fewer ms); within noise when B ÷ A is within the same noise of that span
    k = faster if name.startswith("throughput") else 1 / faster
    q = vb / va
    return min(1, k) - noise <= q <= max(1, k) + noise


def _ranges_said(metric: str, ranges) -> str:
    (la, ha), (lb, hb) = ranges
    return f"{metric} A {la:.4g}–{ha:.4g}, B {lb:.4g}–{hb:.4g}"


def compare(run_a, run_b, min_noise: float = 0.02, min_fraction: float = 0.9) -> Comparison:
    """Compare run B with run A (ids, folders, or lists of records; headlines only come with run folders)."""
    recs = [r if isinstance(r, list) else load_records(r) for r in (run_a, run_b)]
    heads = [load_headlines(resolve_run_dir(r)) if isinstance(r, (str, Path)) else {} for r in (run_a, run_b)]
    grouped = []
    for rs in recs:
        g: dict[tuple, list[tuple[int, dict]]] = defaultdict(list)
        for i, r in enumerate(rs):
            if r.get("kind") in KINDS and r.get("available", True) is not False:
                g[point_key(r)].append((i, r))
        grouped.append(g)
    ga, gb = grouped
    probes = [probe_values(rs) for rs in recs]
    machine_drift = drift(probes[0] + probes[1]) if probes[0] and probes[1] else None
    speed_a, speed_b = (machine_speed(rs) for rs in recs)
    repeats = (repeat_ranges(recs[0]), repeat_ranges(recs[1]))
    points, only_a, only_b = [], 0, 0
    for key in list(ga) + [k for k in gb if k not in ga]:
        la, lb = ga.get(key, []), gb.get(key, [])
        only_a += max(0, len(la) - len(lb))
        only_b += max(0, len(lb) - len(la))
        for (ia, ra), (ib, rb) in zip(la, lb, strict=False):
            faster = speed_b[ib] / speed_a[ia] if ia in speed_a and ib in speed_b else None
            reps = (repeats[0].get(ia, {}), repeats[1].get(ib, {}))
            metrics = {m: _metric(ra, rb, m, f, w, min_noise, machine_drift, faster, reps)
                       for m, f, w in METRICS}
            metrics = {m: v for m, v in metrics.items() if v}
            if not metrics:
                continue
            within = all(v["within_noise"] for v in metrics.values())
            row = {"experiment": ra.get("experiment"), "point": point_label(ra), "within_noise": within,
                   "for_machine": within and any(v["for_machine"] for v in metrics.values()),
                   "for_repeats": within and any(v["for_repeats"] for v in metrics.values()),
                   "machine B÷A": None if faster is None or "ratio" in metrics else round(faster, 3)}
            for m, v in metrics.items():
                row.update({f"{m} A": v["A"], f"{m} B": v["B"], f"{m} Δ%": v["delta_pct"],
                            f"{m} noise%": v["noise_pct"]})
            if row["for_machine"]:
                row["verdict"] = f"within noise once the machine's speed is allowed for (B's {faster:.2f}× A's)"
            elif row["for_repeats"]:
                row["verdict"] = "within noise once this configuration's other measurements in each run are allowed " \
                                 "for: " + ", ".join(_ranges_said(m, v["repeat_ranges"]) for m, v in metrics.items()
                                                     if v["for_repeats"])
            elif within:
                row["verdict"] = "within noise"
            else:
                row["verdict"] = "differs: " + ", ".join(
                    f"{m} {v['delta_pct']:+.1f} % (noise {v['noise_pct']:.1f} %)"
                    for m, v in metrics.items() if not v["within_noise"])
            points.append(row)
    return Comparison(points=points, headlines=compare_headlines(*heads), only_a=only_a, only_b=only_b,
                      min_fraction=min_fraction, machine_drift=machine_drift,
                      probes=(len(probes[0]), len(probes[1])))
