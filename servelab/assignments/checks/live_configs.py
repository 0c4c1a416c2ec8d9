"""Checks that put a student's Triton configuration into the running server and measure it: a batching stanza
loaded with Triton's repository API and compared with the model's own config measured before and after
(`live_config`), and the open-ended search for the most throughput within a p99 budget, graded from the run's
records (`p99_budget`). The model's own config is back in place whatever the answer did.

    live_config(stanza, run=step.run, triton_http_url=url, model=model, max_batch=32, concurrency=8, opts=opts,
                exercise="04.2", step=step)
    p99_budget(explore, trials=Trials(step.run, url, model, opts, "06b-p99"), budget_ms=250, exercise="06b.3")

Measured figures are read as the run's sentences read them (servelab.assignments.checks.predictions).
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from servelab.assignments.checks.config_answers import batching_rules, parse_config
from servelab.assignments.checks.predictions import TIE, measured_bands, reading
from servelab.assignments.result import CheckResult, reject, run_check
from servelab.bench.report import Reading, Why, said


def record_row(rec: dict, label: str) -> dict:
    server = rec.get("server_stats") or {}
    return {"config": label, "throughput_img_s": rec.get("throughput_img_s"),
            "throughput_min_img_s": rec.get("throughput_min_img_s"), "throughput_max_img_s": rec.get("throughput_max_img_s"),
            "window_throughput_img_s": rec.get("window_throughput_img_s"), "latency_p99_ms": rec.get("latency_p99_ms"),
            "avg_batch": server.get("avg_batch"), "errors": rec.get("errors"), "requests": rec.get("requests"),
            "stable": rec.get("stable")}


def served_ok(rec: dict, what: str) -> None:
    if rec.get("errors") or not rec.get("requests"):
        why = (rec.get("error_examples") or ["no request completed"])[0]
        reject(f"{what}: requests failed ({why})")


def live_config(answer, *, run, triton_http_url: str, model: str, max_batch: int, concurrency: int, opts,
                kind: str = "KIND_CPU", count: int | None = None, max_delay_us: int | None = None,
                exercise: str, step=None, strict: bool | None = None) -> CheckResult:
    """answer: config.pbtxt text with `dynamic_batching { … }` and `instance_group [ … ]`, or fn(max_batch) -> text.

    Checked as `batching_stanza` does, then applied live: the running `model` is reloaded with the stanza
    merged into its config (Triton's repository API: load with a config override), measured with
    `concurrency` batch-1 clients, and compared with the model's own config measured just before and just
    after (interleaved, same run); the original config is reloaded whatever happens. Records go to `run`
    (experiment "<exercise>-config", params.config = "default" | "yours").

    Correct: Triton accepts the stanza, reports its values back, and serves every request with it. The
    comparison with the default (a tie when the measured bands overlap) is reported and kept in the detail,
    not graded: a right config can lose on a machine that batch 1 already saturates — explaining that is the
    lesson. The comparison is read as every sentence of the run reads one (`reading`)."""
    from servelab.assignments.live import NotApplied, config_applied, measure_triton
    from servelab.triton.control import _normalise

    experiment = f"{exercise}-config"

    def judge(text):
        cfg = parse_config(text)
        summary = batching_rules(cfg, max_batch, kind, count, max_delay_us)

        def point(label):
            return measure_triton(run, experiment, triton_http_url, model, concurrency=concurrency, opts=opts,
                                  params={"config": label, "exercise": exercise})

        before = point("default")
        try:
            with config_applied(triton_http_url, model, cfg) as reported:
                live = _normalise(reported)
                got_delay = live.dynamic_batching.max_queue_delay_microseconds
                if got_delay != cfg.dynamic_batching.max_queue_delay_microseconds:
                    reject(f"Triton reports a queue delay of {got_delay} µs after loading, not your stanza's")
                n = sum(max(g.count, 1) for g in live.instance_group)
                want = sum(max(g.count, 1) for g in cfg.instance_group)
                if n != want:
                    reject(f"Triton reports {n} instance(s) after loading, not your stanza's {want}")
                yours = point("yours")
        except NotApplied as exc:
            reject(f"Triton refused to load the stanza: {exc}")
        after = point("default")
        served_ok(yours, "with your stanza")
        served_ok(before, "with the default config (before)")
        served_ok(after, "with the default config (after)")
        rows = pd.DataFrame([record_row(before, "default"), record_row(yours, "yours"), record_row(after, "default")])
        band = measured_bands(rows, key="config")
        read = reading(band, "yours", "default")
        verdict = read.side("yours", "default", TIE)
        word = {"yours": "more throughput than", "default": "less throughput than", TIE: "a tie with"}[verdict]
        if read.reading is Reading.CONSISTENT:
            word = f"{'slightly ' if read.why is Why.BELOW_MARGIN else ''}{word}"
        y, d = band.loc["yours"], band.loc["default"]
        p99 = rows.groupby("config")["latency_p99_ms"].mean()
        batch = rows.groupby("config")["avg_batch"].mean()
        detail = {"verdict": verdict, "reading": str(read.reading), "yours_img_s": y["value"], "default_img_s": d["value"],
                  "yours_band": [y["lo"], y["hi"]], "default_band": [d["lo"], d["hi"]],
                  "yours_p99_ms": p99.get("yours"), "default_p99_ms": p99.get("default"),
                  "yours_avg_batch": batch.get("yours"), "default_avg_batch": batch.get("default"), "concurrency": concurrency}
        return (f"Triton loaded your stanza ({summary}) and served {concurrency} clients with it: "
                f"{y['value']:.1f} img/s [{y['lo']:.1f}–{y['hi']:.1f}], p99 {p99.get('yours', float('nan')):.0f} ms — "
                f"{word} the default ({d['value']:.1f} img/s [{d['lo']:.1f}–{d['hi']:.1f}], measured before and after: "
                f"{said(read, 'yours', 'the default', interleaved=False)}); the default config is back in place"), detail

    return run_check("live_config", exercise, answer, (max_batch,), judge, step, strict)


def p99_budget(answer, *, trials, budget_ms: float, exercise: str, step=None, strict: bool | None = None) -> CheckResult:
    """Open-ended. answer: fn(trials, budget_ms) -> the number of the trial you choose (or the dict that trial
    returned). `trials` (servelab.assignments.live.Trials) measures one configuration of the running Triton per
    call — trials(concurrency=…, max_queue_delay_us=…, instances=…, preferred_batch_size=…) — and records it.

    Graded from the run's records (records.jsonl), not from numbers the function returns. Correct: the chosen
    trial served every request with p99 ≤ `budget_ms`; no other trial of yours met the budget with throughput
    clearly above it (bands overlapping, or closer than the run's ranking margin = a tie); and it is not clearly
    below the one-client baseline the check measures before and after your trials (the two pooled) — unless it is
    that baseline's configuration (one client, nothing changed), which can only differ from it by noise. The score
    (the chosen trial's img/s) is kept in the detail for the grade sheet."""
    from servelab.bench.results.records import load_records

    baseline = trials.baseline()

    def judge(value):
        chosen = value.get("trial") if isinstance(value, Mapping) else value
        if isinstance(chosen, bool) or not isinstance(chosen, (int, float)) or chosen != int(chosen):
            reject(f"return the number of the trial you choose (trials() returns it as 'trial'), got {value!r}")
        recs = [r for r in load_records(trials.run.dir) if r.get("experiment") == trials.experiment]
        mine = {r["params"]["trial"]: r for r in recs if isinstance((r.get("params") or {}).get("trial"), int)}
        if int(chosen) not in mine:
            reject(f"trial {chosen} is not in this run's records: choose one of the trials you measured")
        rec = mine[int(chosen)]
        served_ok(rec, f"trial {chosen}")
        p99 = rec["latency_p99_ms"]
        if p99 is None or p99 > budget_ms:
            reject(f"trial {chosen} had p99 {p99:.0f} ms, over the {budget_ms:.0f} ms budget")
        ok = {k: r for k, r in mine.items()
              if not r.get("errors") and r.get("requests") and (r.get("latency_p99_ms") or 1e18) <= budget_ms}
        after = trials.baseline_after()  # bracket the trials: drift on a shared machine moves both ends
        for ref, when in ((baseline, "before"), (after, "after")):
            served_ok(ref, f"the one-client baseline measured {when} your trials")
        rows = pd.DataFrame([record_row(r, k) for k, r in ok.items()]
                            + [record_row(baseline, "baseline"), record_row(after, "baseline")])
        band = measured_bands(rows, key="config")
        me = band.loc[int(chosen)]

        def clearly_above(other) -> bool:  # as a report sentence ranks figures measured apart (`reading`): both
            v = reading(band, other, int(chosen))  # with a spread, clear of each other, by more than the run's margin
            return v.ranked and v.ahead == "a"

        better = [k for k in ok if k != int(chosen) and clearly_above(k)]
        if better:
            reject(f"trial {chosen} meets the budget, but another of your trials also met it with throughput "
                   f"clearly above it (beyond the measured spread)")
        base = band.loc["baseline"]
        if not trials.is_baseline(rec["params"].get("settings")) and clearly_above("baseline"):  # the baseline's own config differs from it only by the machine
            reject(f"trial {chosen} gives less throughput than one client with the default config "
                   f"({base['value']:.1f} img/s) — more clients or batching should not be worse")
        detail = {"score_img_s": me["value"], "p99_ms": p99, "budget_ms": budget_ms, "trial": int(chosen),
                  "settings": rec["params"].get("settings"), "trials": len(mine), "baseline_img_s": base["value"]}
        return (f"trial {chosen} ({rec['params'].get('settings')}): {me['value']:.1f} img/s "
                f"[{me['lo']:.1f}–{me['hi']:.1f}] at p99 {p99:.0f} ms ≤ {budget_ms:.0f} ms; one client, default "
                f"config: {base['value']:.1f} img/s; {len(mine)} trial(s) measured"), detail

    return run_check("p99_budget", exercise, answer, (trials, budget_ms), judge, step, strict)

