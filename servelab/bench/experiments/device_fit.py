"""A device profile fitted to a run's measured batch curve: what `servelab bench device-profile <run>` writes.

    from servelab.bench.experiments.device_fit import batch_curve, fit_profile
    curve = batch_curve(records, engine="onnx", provider="cuda")   # {batch: seconds per batch}, raw in-process records
    p = fit_profile(curve, name="onnx-cuda-h100", source="…")        # DeviceProfile, t(B) as servelab.model.device_profile

t(B) is the measured raw (in-process, one caller) time of a batch: B ÷ its throughput. The fit is the profile's
curve, t(B) = fixed + per_image · max(B, full_at): for each measured batch size taken as `full_at`, fixed and
per_image (both ≥ 0) are fitted by least squares on relative error, and the `full_at` whose curve misses the
measured points least is kept. The time scale makes t(1) about `target_t1_s`, so a laptop serving the emulated
device is not the bottleneck; ratios such as t(1)·N ÷ t(N) are unchanged by it.
"""

from __future__ import annotations

import numpy as np

from servelab.errors import InvalidValue
from servelab.model.device_profile import DeviceProfile


def batch_curve(records: list[dict], *, engine: str | None = None, provider: str | None = None,
                precision: str | None = None, experiment: str | None = None) -> dict[int, float]:
    """{batch size: seconds per batch} from a run's raw in-process records (the median where a size repeats).
    `precision` and `experiment` pick one curve where a run measured several (the GPU reference: fp32, fp16 and
    bf16; the engine with its input on the device, `gpu-raw`, or fed from host memory, `gpu-raw-host`)."""
    wanted = {"engine": engine, "provider": provider, "precision": precision, "experiment": experiment}
    rows = [r for r in records if r.get("kind") == "raw" and r.get("available", True) is not False
            and r.get("batch") and r.get("throughput_img_s") and r.get("variant") in (None, "eager")
            and all(v is None or r.get(k) == v for k, v in wanted.items())]
    if not rows:
        which = ", ".join(f"{k} {v}" for k, v in wanted.items() if v) or "any engine"
        raise InvalidValue(f"the run has no raw in-process batch records for {which}: run `servelab bench engines` "
                           "or `servelab bench batch-sweep` there first")
    found = {(r.get("engine"), r.get("provider")) for r in rows}
    if len(found) > 1:
        raise InvalidValue(f"the run measured several engines ({', '.join(f'{e} on {p}' for e, p in sorted(found))}): "
                           "choose one with --engine and --provider")
    curves = {(r.get("precision"), r.get("experiment")) for r in rows}
    if len(curves) > 1:
        raise InvalidValue(f"the run measured several curves of that engine ({', '.join(sorted(f'{p} in {e}' for p, e in curves))}): "
                           "choose one with --precision and --experiment")
    times: dict[int, list[float]] = {}
    for r in rows:
        times.setdefault(int(r["batch"]), []).append(r["batch"] / r["throughput_img_s"])
    return {b: float(np.median(t)) for b, t in sorted(times.items())}


def _fit(curve: dict[int, float], full_at: int) -> tuple[float, float, float]:
    """(fixed_s, per_image_s, squared relative error) of t = fixed + per_image · max(B, full_at)."""
    b = np.array(list(curve), float)
    t = np.array(list(curve.values()), float)
    x = np.maximum(b, full_at)
    a = np.stack([np.ones_like(x), x], axis=1) / t[:, None]  # relative error: each row divided by its time
    (fixed, per_image), *_ = np.linalg.lstsq(a, np.ones_like(t), rcond=None)
    if fixed < 0 or per_image < 0:  # the best curve with a term at zero
        options = [(0.0, float(np.sum(x / t) / np.sum((x / t) ** 2))), (float(np.sum(1 / t) / np.sum(t ** -2)), 0.0)]
        fixed, per_image = min(options, key=lambda fp: float(np.sum(((fp[0] + fp[1] * x) / t - 1) ** 2)))
    err = float(np.sum(((fixed + per_image * x) / t - 1) ** 2))
    return float(fixed), float(per_image), err


def fit_profile(curve: dict[int, float], *, name: str, source: str, target_t1_s: float = 0.1,
                time_scale: float | None = None) -> DeviceProfile:
    """The profile whose curve fits the measured {batch: seconds}; time_scale None: t(1) ≈ target_t1_s (≥ 1)."""
    if len(curve) < 2:
        raise InvalidValue(f"a batch curve needs at least two batch sizes, the run has {sorted(curve) or 'none'}")
    full_at = min(curve, key=lambda k: (_fit(curve, k)[2], k))
    fixed, per_image, _ = _fit(curve, full_at)
    unscaled_t1 = fixed + per_image * full_at
    if time_scale is None:
        time_scale = max(1.0, float(f"{target_t1_s / unscaled_t1:.2g}"))
    points = ", ".join(f"t({b}) = {t * 1000:.3g} ms" for b, t in curve.items())
    return DeviceProfile(name=name, fixed_ms=round(fixed * 1000, 5), per_image_ms=round(per_image * 1000, 6),
                         full_at=int(full_at), time_scale=time_scale,
                         source=f"{source}; measured {points}; fitted t(B) = fixed + per-image × max(B, full_at); "
                                f"slowed down {time_scale:g}× so that a laptop's CPU keeps up with the emulated device")
