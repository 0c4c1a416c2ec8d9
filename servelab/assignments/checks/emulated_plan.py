"""Exercise 05a.3's check: a batching plan for an emulated accelerator, made from its profile before anything is
measured, then applied to the emulated model in the running Triton and measured against the default in
alternating windows. Graded from the records it writes; the prediction is held to what the plan serves.

    emulated_plan(plan, emulated=emu, device=emu.profile, run=step.run, clients=8, opts=opts, exercise="05a.3")
"""

from __future__ import annotations

from collections.abc import Mapping

from servelab.assignments.checks.answer_tables import close, number
from servelab.assignments.checks.live_configs import served_ok
from servelab.assignments.result import CheckResult, NotRunHere, reject, run_check

QUICK_PLAN_TOL = 0.5  # emulated_plan's bound in a smoke run: a prediction off by 2× still fails


def emulated_plan(answer, *, emulated, device, run, clients: int, opts, exercise: str, step=None,
                  rel_tol: float = 0.3, strict: bool | None = None) -> CheckResult:
    """answer: fn(device, clients) -> {"max_batch_size", "max_queue_delay_us", "instances", "predicted_img_s"}: the
    configuration you expect to serve `clients` batch-1 clients best on the emulated `device` (a DeviceProfile),
    and the throughput you predict for it from the profile's t(B), before anything is measured.

    Applied live to the emulated accelerator (`emulated`: servelab.bench.emulated_lesson.EmulatedTriton, the lab
    Triton's emulated model; None where the Triton has none: not run) and measured in alternating windows against
    the default (dynamic batching without a queue delay, max_batch_size 32, one instance); the records go to `run`
    (experiment "<exercise>-plan"); the model's own config is loaded again after.
    Graded from those records: correct when every request was served, your configuration is not clearly below
    the default (the ratio's window pairs decide), and what your plan serves is within `rel_tol` (a smoke run: 50 %) of your
    prediction. "What your plan serves" is the clients ÷ Triton's own time per request (queue wait plus the
    device), by Little's law: the throughput with clients that resend at once. On a laptop the CPU adds time
    around each request that a GPU server's clients would not see in the same way, and a busy 2-core machine
    can add a third; that time is reported beside it, not charged to the plan. The ratio and the figures are
    kept in the detail."""
    from servelab.bench.experiments.emulated_lesson import TEMPLATE_MAX_BATCH
    from servelab.bench.report import ratio_verdict
    from servelab.bench.results.records import load_records

    experiment = f"{exercise}-plan"

    def judge(value):
        if not isinstance(value, Mapping):
            reject("return a dict with max_batch_size, max_queue_delay_us, instances and predicted_img_s")
        missing = {"max_batch_size", "max_queue_delay_us", "instances", "predicted_img_s"} - set(value)
        if missing:
            reject(f"your plan lacks {', '.join(sorted(missing))}")
        mb, delay, inst = (number(value[k], k) for k in ("max_batch_size", "max_queue_delay_us", "instances"))
        predicted = number(value["predicted_img_s"], "predicted_img_s")
        if mb != int(mb) or not 1 <= mb <= TEMPLATE_MAX_BATCH:
            reject(f"max_batch_size must be a whole number 1..{TEMPLATE_MAX_BATCH} (the staged model's limit)")
        if inst != int(inst) or not 1 <= inst <= 4:
            reject("instances must be a whole number 1..4 on this machine")
        if delay != int(delay) or not 0 <= delay <= 1_000_000:
            reject("max_queue_delay_us must be a whole number of microseconds, 0..1,000,000")
        if predicted <= 0:
            reject("predicted_img_s must be positive: your prediction from the profile's t(B)")
        if emulated is None:
            raise NotRunHere("this Triton has no emulated accelerator model (a GPU node's repository has none)")
        yours_cfg = emulated.config(delay_us=int(delay), max_batch=int(mb), instances=int(inst))
        try:
            emulated.ab(run, experiment, yours_cfg, emulated.config(delay_us=0),
                        label_a="your plan", label_b="default", concurrency=clients, opts=opts)
        finally:
            emulated.restore()  # the model's own config again
        recs = [r for r in load_records(run.dir) if r.get("experiment") == experiment]
        yours = next(r for r in reversed(recs) if r.get("kind") == "load" and r["params"].get("side") == "a")
        ratio = next(r for r in reversed(recs) if r.get("kind") == "ab")
        served_ok(yours, "with your plan")
        measured = float(yours["throughput_img_s"])
        server_ms = (yours.get("server_stats") or {}).get("avg_request_ms")
        served = clients / (server_ms / 1000) if server_ms else measured  # Little's law, the server's own time
        cycle_ms = clients / measured * 1000 if measured > 0 else float("nan")  # each client's request, end to end
        outside = (f"{cycle_ms - server_ms:.0f} ms of it outside Triton" if server_ms and cycle_ms > server_ms else
                   "no time measurable outside Triton's own")
        ahead, _ = ratio_verdict(ratio)
        figures = (f"your plan (max_batch_size {int(mb)}, queue delay {int(delay)} µs, {int(inst)} instance(s)) "
                   f"serves {clients} clients at {served:.1f} img/s on {device.label} (Triton's own "
                   f"{server_ms or 0:.0f} ms per request; {measured:.1f} img/s end to end, i.e. {cycle_ms:.0f} ms a "
                   f"request for each client, {outside}); "
                   f"you predicted {predicted:.1f}; against the default in "
                   f"alternating windows: {ratio['ratio']:.2f}×")
        detail = {"served_img_s": served, "measured_img_s": measured, "server_request_ms": server_ms,
                  "predicted_img_s": predicted, "ratio_vs_default": ratio["ratio"],
                  "ratio_min": ratio["ratio_min"], "ratio_max": ratio["ratio_max"], "device": device.label,
                  "plan": {"max_batch_size": int(mb), "max_queue_delay_us": int(delay), "instances": int(inst)}}
        if ahead == ratio["b"]:
            reject(f"{figures}: clearly below the default — which requests end up in one batch with your settings?",
                   detail)
        # a smoke run's windows last a second on a machine it shares with other work: requests that resend late
        # wait out a queue delay, so its figures are held to a looser bound (and are not results)
        tol = max(rel_tol, QUICK_PLAN_TOL) if getattr(opts, "quick", False) else rel_tol
        if not close(served, predicted, tol):
            reject(f"{figures}: your prediction is more than {tol:.0%} off; from t(B), how many images does one "
                   f"round of {clients} clients take, and in how many batches?", detail)
        return figures, detail

    return run_check("emulated_plan", exercise, answer, (device, clients), judge, step, strict)

