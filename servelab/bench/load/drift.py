"""How far the machine alone moved: a fixed reference workload measured again and again through a run.

A shared VM's speed changes by minutes (neighbours, steal, frequency), so two figures measured minutes apart —
two points of one run, or one point in two runs — differ by more than either point's window bands show. The
*drift probe* measures that floor: the in-process ONNX engine at batch 1 (no server, no client, nothing of the
stack in the path) for two seconds, before every notebook of a lab run and once at the end, written as
`kind: "probe"` records. `drift(probes)` says how much two probe measurements taken at different moments
typically differed; `servelab bench compare` uses it as the noise of figures compared between runs (an
interleaved ratio cancels drift and keeps its own pair range).

What moves, on the 2-core Zen 4 VMs the lab was timed on, is work split across both cores: over ten minutes one
ONNX Runtime session on two threads (the probe's workload) went between 16 and 19 img/s at batch 1, and 37 and 58
at batch 8 in int8, with or without its threads spinning, while one single-thread session held within 2 % and two
single-thread sessions side by side made twice that, as steadily. So the probe measures what every two-thread figure
of the run feels, and a server running single-thread instances (the service) feels it little.
"""

from __future__ import annotations

import itertools
import time
from datetime import datetime

import numpy as np

EXPERIMENT = "drift-probe"
# seconds per probe: about 50 back-to-back calls at batch 1 on two cores, enough for a median that moves only with
# the machine; 13 probes in a default lab cost half a minute rather than the minute 4-s probes took
PROBE_S = 2.0
QUANTILE = 0.9  # "9 of 10 pairs of probes differed by less than this"


class DriftProbe:
    """The reference workload, loaded once (an ONNX Runtime session in this process) and measured on demand."""

    def __init__(self, engine: str = "onnx", batch: int = 1):
        from servelab.bench.load.inputs import sample_tensor
        from servelab.bench.servers.in_process import make_embedder

        self.engine, self.batch = engine, batch
        self.embedder = make_embedder(engine)
        self.tensor = sample_tensor(batch)
        for _ in range(3):  # first calls allocate; they are not the machine's speed
            self.embedder.embed(self.tensor)

    def measure(self, seconds: float = PROBE_S) -> dict:
        """Back-to-back calls for `seconds`: throughput and median latency of this moment."""
        lat = []
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds or len(lat) < 3:
            t = time.perf_counter()
            self.embedder.embed(self.tensor)
            lat.append(time.perf_counter() - t)
        elapsed = time.perf_counter() - t0
        return {"throughput_img_s": round(len(lat) * self.batch / elapsed, 4),
                "latency_p50_ms": round(1000 * float(np.median(lat)), 4), "requests": len(lat),
                "measured_s": round(elapsed, 3)}

    def record(self, run, before: str, seconds: float = PROBE_S) -> dict:
        """Measure now and write a probe record to `run` (a servelab.bench.results.records.Run); `before` names the
        moment (the notebook about to start, or "end")."""
        m = self.measure(seconds)
        return run.record(EXPERIMENT, kind="probe", server="in-process", backend="in-process", engine=self.engine,
                          provider="cpu", protocol="inproc", payload="tensor", batch=self.batch, concurrency=1,
                          note=f"before {before}" if before != "end" else "end of run",
                          params={"before": before, "threads": getattr(self.embedder, "threads", None)}, **m)


def probe_values(records: list[dict]) -> list[float]:
    return [float(r["throughput_img_s"]) for r in records
            if r.get("kind") == "probe" and r.get("throughput_img_s")]


def drift(values: list[float]) -> float | None:
    """The relative difference between two probe measurements that 9 of 10 pairs stayed within
    (|a − b| / median of all, over every pair); None with fewer than two probes."""
    v = [x for x in values if x and np.isfinite(x)]
    if len(v) < 2:
        return None
    med = float(np.median(v))
    diffs = [abs(a - b) / med for a, b in itertools.combinations(v, 2)]
    return float(np.quantile(diffs, QUANTILE))


def _moment(r: dict) -> float | None:
    try:
        return datetime.fromisoformat(r["timestamp"]).timestamp()
    except (KeyError, TypeError, ValueError):
        return None


def _between(before: tuple, after: tuple, t: float | None) -> float:
    """The probe figure at moment t, on the straight line from the probe before to the probe after."""
    (t0, a), (t1, b) = before, after
    w = (t - t0) / (t1 - t0) if None not in (t, t0, t1) and t1 > t0 else 0.5
    return a + (b - a) * min(1.0, max(0.0, w))


def machine_speed(records: list[dict]) -> dict[int, float]:
    """The machine's speed when each record of a run was taken (keyed by its position in the run's records, which
    are in time order): the drift probes' throughput, interpolated between the probe before and the one after it."""
    probes = [(i, _moment(r), float(r["throughput_img_s"])) for i, r in enumerate(records)
              if r.get("kind") == "probe" and r.get("throughput_img_s")]
    speed = {}
    for i, r in enumerate(records):
        if r.get("kind") == "probe" or not probes:
            continue
        before = [p for p in probes if p[0] < i]
        after = [p for p in probes if p[0] > i]
        ends = (before[-1] if before else after[0])[1:], (after[0] if after else before[-1])[1:]
        speed[i] = _between(*ends, _moment(r))
    return speed


def describe(values: list[float]) -> str:
    """One line for a report: the probe's median, range and drift."""
    d = drift(values)
    if d is None:
        return "drift probe: fewer than two measurements, so the machine's own drift is unknown"
    return (f"drift probe (in-process ONNX, batch 1): median {np.median(values):.1f} img/s, range "
            f"{min(values):.1f}–{max(values):.1f} over {len(values)} measurements; 9 of 10 pairs of them "
            f"differed by less than {100 * d:.0f} %")
