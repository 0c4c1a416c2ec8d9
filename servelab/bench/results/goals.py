"""Goals: pass/fail thresholds the course sets on measured figures, written as `derived` records.

A goal record carries the measured value, its band (from window min–max or the A/B pair ratios), the goal
(`op` + `threshold`) and a verdict: met / not met, or *undecided* when the band straddles the threshold —
a verdict never rests on a difference the run cannot resolve. It also says whether its inputs settled
(`inputs_stable`) and whether they came from a smoke run (`quick`: not a result). Their table: servelab.bench.report.goals_table.
"""

from __future__ import annotations

from servelab.bench.results.records import Run, served_by_of
from servelab.vocabulary import MODEL_ENGINES


def _meets(v: float, op: str, threshold: float) -> bool:
    return v >= threshold if op == ">=" else v <= threshold


def goal_record(run: Run, experiment: str, name: str, value: float | None, op: str | None,
                threshold: float | None, *, band: tuple | None = None, note: str | None = None,
                inputs: list | None = None) -> dict:
    """A derived record: the goal, the measured value and band, and the verdict (op None: informational)."""
    inputs = [r for r in (inputs or []) if r]
    lo, hi = band if band and None not in band else (value, value)
    met = None
    if value is not None and op is not None:
        met = _meets(value, op, threshold)
        if lo is not None and hi is not None and _meets(lo, op, threshold) != _meets(hi, op, threshold):
            met = None  # the band straddles the goal: undecided here
    return run.record(experiment, kind="derived", server="goal", goal=name, params={"served_by": served_by_of(inputs)},
                      value=None if value is None else round(float(value), 4),
                      value_min=None if lo is None else round(float(lo), 4),
                      value_max=None if hi is None else round(float(hi), 4),
                      op=op, threshold=threshold, met=met, note=note,
                      inputs_stable=all(r.get("stable") for r in inputs) if inputs else None,
                      quick=any(_is_quick(r) for r in inputs))


def _is_quick(r: dict) -> bool:
    return bool(r.get("quick")) or (r.get("params") or {}).get("load", {}).get("label") == "quick"


def _find(records, **kv):
    for r in records:
        if all(r.get(k) == v for k, v in kv.items()):
            return r
    return None


def _ratio(records, label_a: str, label_b: str, **kv):
    return _find(records, kind="ab", a=label_a, b=label_b, **kv)


def ratio_goal(run: Run, experiment: str, name: str, rec: dict | None, op: str, threshold: float,
               note: str | None = None) -> list[dict]:
    """A goal on an interleaved A/B ratio record (its band: the per-pair ratios' min–max)."""
    if not rec or rec.get("ratio") is None:
        return []
    return [goal_record(run, experiment, name, rec["ratio"], op, threshold, band=(rec.get("ratio_min"),
                        rec.get("ratio_max")), note=note, inputs=[rec])]


def _quotient_band(a: dict, b: dict, metric: str = "throughput"):
    lo_a, hi_a = a.get(f"{metric}_min_img_s"), a.get(f"{metric}_max_img_s")
    lo_b, hi_b = b.get(f"{metric}_min_img_s"), b.get(f"{metric}_max_img_s")
    if None in (lo_a, hi_a, lo_b, hi_b) or not lo_b or not hi_b:
        return None
    return lo_a / hi_b, hi_a / lo_b


def service_goals(run: Run, records: list[dict], *, hi=16, lo=1, big=16, small=1) -> list[dict]:
    """served c=hi ÷ raw batch big ≥ 0.95 (interleaved); served c=lo p50 − raw batch small p50 ≤ 3 ms;
    int8 ≥ 2.5 × torch fp32 throughput (batch big) at cosine ≥ 0.999 vs torch fp32."""
    out = []
    for engine in MODEL_ENGINES:
        r = _ratio(records, f"fastapi c={hi}", f"raw batch {big}", engine=engine)
        out += ratio_goal(run, "service", f"{engine}: served c={hi} / raw batch {big} throughput", r, ">=", 0.95)
        raw_small = _find(records, kind="raw", engine=engine, batch=small)
        s_lo = _find(records, kind="load", server="fastapi", engine=engine, concurrency=lo)
        if raw_small and s_lo and raw_small["latency_p50_ms"] is not None and s_lo["latency_p50_ms"] is not None:
            band = None
            if None not in (s_lo.get("latency_p50_min_ms"), s_lo.get("latency_p50_max_ms"),
                            raw_small.get("latency_p50_min_ms"), raw_small.get("latency_p50_max_ms")):
                band = (s_lo["latency_p50_min_ms"] - raw_small["latency_p50_max_ms"],
                        s_lo["latency_p50_max_ms"] - raw_small["latency_p50_min_ms"])
            out.append(goal_record(run, "service", f"{engine}: served c={lo} p50 - raw batch {small} p50 (ms)",
                                   s_lo["latency_p50_ms"] - raw_small["latency_p50_ms"], "<=", 3.0, band=band,
                                   inputs=[s_lo, raw_small]))
    t = _find(records, kind="raw", engine="torch", batch=big)
    q = _find(records, kind="raw", engine="onnx-int8", batch=big)
    if t and q and t["throughput_img_s"]:
        out.append(goal_record(run, "service", f"onnx-int8 / torch fp32 throughput (batch {big})",
                               q["throughput_img_s"] / t["throughput_img_s"], ">=", 2.5, band=_quotient_band(q, t),
                               inputs=[q, t], note="measured one after the other (one engine loaded at a time)"))
        out.append(goal_record(run, "service", "onnx-int8 min cosine vs torch fp32", q.get("cosine_vs_torch_fp32"),
                               ">=", 0.999, inputs=[q], note="min over 8 synthetic photos"))
    return out


def triton_goals(run: Run, records: list[dict], *, concurrency: int = 16, offline_batch: int = 16) -> list[dict]:
    """Triton (tensor) at c ≥ 0.95 × offline batch; JPEG ≥ tensor throughput, per protocol (interleaved)."""
    out = []
    for proto in ("grpc", "http"):
        out += ratio_goal(run, "triton", f"triton-{proto} tensor c={concurrency} / offline batch {offline_batch}",
                          _ratio(records, f"triton-{proto} c={concurrency}", f"raw batch {offline_batch}"), ">=", 0.95)
        out += ratio_goal(run, "triton", f"triton-{proto} jpeg / tensor throughput c={concurrency}",
                          _ratio(records, f"triton-{proto} jpeg", f"triton-{proto} tensor"), ">=", 1.0)
    return out


def peer_goals(run: Run, records: list[dict], concurrency: int = 16) -> list[dict]:
    """servelab ÷ LitServe throughput (interleaved) ≥ 1.10 at c (concurrent clients, where the service's engine
    instances run side by side) and ≥ 1.0 at c=1 when measured; the p50 ratio at c reported beside them."""
    out, r = [], None  # r ends as the record at `concurrency`, the loop's last
    for c, threshold in ((1, 1.0), (concurrency, 1.10)) if concurrency > 1 else ((concurrency, 1.0),):
        r = _find(records, kind="ab", a="fastapi", b="litserve", concurrency=c)
        out += ratio_goal(run, "peer-baseline", f"servelab / LitServe throughput at c={c}", r, ">=", threshold)
    if r and r.get("latency_p50_ratio") is not None:
        out.append(goal_record(run, "peer-baseline", f"servelab / LitServe p50 latency at c={concurrency}",
                               r["latency_p50_ratio"], None, None, inputs=[r], note="median of the window pairs"))
    return out


def scaling_efficiency(run: Run, records: list[dict], experiment: str = "instances") -> list[dict]:
    """throughput(n) ÷ (n × throughput(1)) per instance count and concurrency (informational)."""
    pts = [r for r in records if r.get("kind") == "load" and (r.get("params") or {}).get("instances") is not None]
    out = []
    for r in pts:
        base = next((b for b in pts if b["params"]["instances"] == 1 and b["concurrency"] == r["concurrency"]), None)
        n = r["params"]["instances"]
        if base and base["throughput_img_s"] and n != 1:
            band = _quotient_band(r, base)
            out.append(goal_record(run, experiment, f"scaling efficiency x{n} c={r['concurrency']}",
                                   r["throughput_img_s"] / (n * base["throughput_img_s"]), None, None,
                                   band=(band[0] / n, band[1] / n) if band else None, inputs=[r, base],
                                   note="throughput / (instances × throughput of 1 instance)"))
    return out
