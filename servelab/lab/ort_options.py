"""ONNX Runtime sessions of one model with different options, timed by hand in rounds (notebook 05a, section 0),
and read the way an interleaved A/B is: each ratio taken within a round, its spread over the rounds kept, so the
lesson's verdict helpers (`step.ratio`) can say ranked, consistent or indistinguishable.

    vnni_flags()                                    # ["avx512_vnni"] on a CPU with 8-bit multiply-add, else []
    times = time_rounds(sessions, x, rounds=5, runs=3)          # {name: [median ms of each round]}
    rows = option_rows(times, outputs, base="fp32, ORT_ENABLE_ALL")   # the table, one row per session
    rec = round_ratio(times, "fp32, ORT_ENABLE_ALL", "fp32, ORT_DISABLE_ALL", labels=("fused", "as exported"))
    step.ratio(rec, what="speed")  # "fused ÷ as exported speed: 1.06× (pairs 0.80–1.10); … indistinguishable …"
    cosine_text(0.99962)           # "0.999620 (1 − cos = 3.8e-04)": never rounded to a false 1.000000
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from servelab.model.export import cosine_rows

CPUINFO = Path("/proc/cpuinfo")


def vnni_flags(cpuinfo: Path | str = CPUINFO) -> list[str]:
    """The CPU's VNNI flags (`avx512_vnni`, `avx_vnni`, …): int8 matrix products run on 8-bit multiply-add
    instructions only where one is present. [] where there is none, or no /proc/cpuinfo to read."""
    path = Path(cpuinfo)
    if not path.is_file():
        return []
    flags = next((line.split(":", 1)[1].split() for line in path.read_text().splitlines()
                  if line.startswith("flags")), [])
    return sorted({f for f in flags if "vnni" in f})


def time_rounds(sessions: Mapping, x: np.ndarray, *, rounds: int, runs: int) -> dict[str, list[float]]:
    """Run every session on `x` `runs` times in turn, `rounds` times over: {name: [median ms of each round]}.
    Taking all sessions in each round lets the machine's drift hit them alike, so ratios within a round cancel it."""
    times: dict[str, list[float]] = {name: [] for name in sessions}
    for _ in range(rounds):
        for name, sess in sessions.items():
            feed = {sess.get_inputs()[0].name: x}
            one = []
            for _ in range(runs):
                t0 = time.perf_counter()
                sess.run(None, feed)
                one.append(1000 * (time.perf_counter() - t0))
            times[name].append(float(np.median(one)))
    return times


def cosine_text(cos: float) -> str:
    """A cosine close to 1 said so that its distance from 1 shows: "0.999620 (1 − cos = 3.8e-04)". Six decimals
    alone print 0.9999996 as 1.000000, which hides that two embeddings differ."""
    return f"{cos:.6f} (1 − cos = {1.0 - cos:.1e})"


def option_rows(times: Mapping[str, Sequence[float]], outputs: Mapping[str, np.ndarray], base: str) -> list[dict]:
    """One table row per session: its ms per image (median, min, max over the rounds), its speed ÷ `base`'s
    within each round (median, min, max) and its embedding's cosine to `base`'s, unrounded, with 1 − cosine."""
    rows = []
    for name, ms in times.items():
        ratios = np.asarray(times[base]) / np.asarray(ms)  # > 1: faster than `base`, round by round
        cos = float(cosine_rows(*(np.atleast_2d(outputs[k]).astype(np.float64) for k in (name, base)))[0])
        rows.append({"session": name, "ms_batch_1_median": round(float(np.median(ms)), 3),
                     "ms_min": round(min(ms), 3), "ms_max": round(max(ms), 3),
                     f"speed_vs_{_slug(base)}": round(float(np.median(ratios)), 3),
                     "ratio_min": round(float(ratios.min()), 3), "ratio_max": round(float(ratios.max()), 3),
                     "cosine_vs_fp32": cos, "one_minus_cosine": float(f"{1.0 - cos:.3g}")})
    return rows


def _slug(name: str) -> str:
    """The base session's name as a column suffix: "fp32, ORT_ENABLE_ALL" -> "enable_all"."""
    return name.split(",")[-1].strip().removeprefix("ORT_").lower().replace(" ", "_")


def round_ratio(times: Mapping[str, Sequence[float]], a: str, b: str, *, labels: tuple[str, str] | None = None,
                quick: bool = False) -> dict:
    """Session `a`'s speed ÷ session `b`'s (b's ms ÷ a's), taken within each round, as a ratio record the verdict
    helpers read (`step.ratio`, `ratio_reading`): the median and the min–max over the rounds, the rounds as
    `repeats`, the sides named by `labels` (default: the session names)."""
    ratios = np.asarray(times[b]) / np.asarray(times[a])
    name_a, name_b = labels or (a, b)
    return {"kind": "ab", "a": name_a, "b": name_b, "ratio": float(np.median(ratios)),
            "ratio_min": float(ratios.min()), "ratio_max": float(ratios.max()), "repeats": len(ratios),
            "quick": quick}
