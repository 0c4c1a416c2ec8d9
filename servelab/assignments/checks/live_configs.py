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
from servelab.assignments.result import CheckResult, NotRunHere, reject, run_check
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



# --- the student at the controls (lesson 04): a config edited on disk, its load request, perf_analyzer's lines, /stats


def _config_file(path, what: str):
    """The file at `path` parsed as Triton's ModelConfig (rejects with the parse error's line and column)."""
    from pathlib import Path

    if not Path(path).is_file():
        reject(f"{path} is not there any more: run the cell that copies the encoder again")
    return parse_config(Path(path).read_text(), what)


def _without(cfg, *fields):
    out = type(cfg)()
    out.CopyFrom(cfg)
    for f in fields:
        out.ClearField(f)
    return out


def config_on_disk(answer, *, path, original, model: str, exercise: str, step=None, strict: bool | None = None,
                   not_here: str | None = None) -> CheckResult:
    """answer: fn(path) that edits the config.pbtxt at `path` (the student's copy of the encoder whose config is
    the file `original`; its model name `model`) on disk so that it runs without dynamic batching; or None when
    the file was edited in Jupyter's editor.

    Correct: the file parses as Triton's ModelConfig, its `name` is `model` (the folder's), it has no
    dynamic_batching stanza, and nothing else differs from `original`. `not_here`: the reason this place has no
    such file (a server whose files are elsewhere): the check reports `not run`."""
    from pathlib import Path

    def judge(_):
        if not_here:
            raise NotRunHere(not_here)
        cfg = _config_file(path, "your config.pbtxt")
        if cfg.name != model:
            reject(f'its name: is "{cfg.name}"; the folder is {model}, and Triton loads a folder only under its own name')
        if cfg.HasField("dynamic_batching"):
            reject("the file still has a dynamic_batching stanza: delete it, from its first line to its closing brace")
        mine, theirs = _without(cfg, "name"), _without(_config_file(original, "the encoder's config.pbtxt"),
                                                        "name", "dynamic_batching")
        changed = [f.name for f in mine.DESCRIPTOR.fields if getattr(mine, f.name) != getattr(theirs, f.name)]
        if changed:
            reject(f"more than dynamic_batching changed ({', '.join(changed)}): change only that, or the comparison "
                   "measures your other edits too")
        return f"{path} parses as Triton's ModelConfig: {model}, max_batch_size {cfg.max_batch_size}, no dynamic_batching"

    return run_check("config_on_disk", exercise, answer if not not_here else None,
                     (Path(path) if path else None,), judge, step, strict)


def loaded_from_disk(answer, *, http_url: str, model: str, path, exercise: str, step=None,
                     strict: bool | None = None, not_here: str | None = None) -> CheckResult:
    """answer: fn(address, model) that sends Triton's repository-API load for `model` (tritonclient's
    `load_model(model, headers=…)`, with the server's key), or None when it was sent another way (curl).

    The check first unloads `model` if it is loaded, so only your request can load it. Correct: the running
    server at `http_url` has `model` ready, with the config of the file at `path` as Triton reads it: no
    dynamic_batching, and the file's max_batch_size and instances (a load with a config override of its own
    would serve something else than the file). `not_here`: not run, with that reason."""
    from servelab.triton.control import _normalise, get_config, model_states, unload_model

    if not not_here and str(model_states(http_url).get(model, "")).startswith("READY"):
        unload_model(http_url, model)

    def judge(_):
        if not_here:
            raise NotRunHere(not_here)
        state = model_states(http_url).get(model, "not in the repository index")
        if not str(state).startswith("READY"):
            reject(f"the server has no {model} ready ({state}): send the load request for it (the repository API "
                   "refuses it without the server's key: headers=lab.triton_headers)")
        disk = _config_file(path, "the config.pbtxt on disk")
        live = _normalise(get_config(http_url, model))
        if live.HasField("dynamic_batching") != disk.HasField("dynamic_batching"):
            reject("the server's config of the model " + ("has" if live.HasField("dynamic_batching") else "has no")
                   + " dynamic_batching and the file on disk " + ("has none" if live.HasField("dynamic_batching")
                                                                  else "has one")
                   + ": load without a config of your own, so Triton reads the file")
        n_live = sum(max(g.count, 1) for g in live.instance_group)
        n_disk = sum(max(g.count, 1) for g in disk.instance_group) or n_live
        if live.max_batch_size != disk.max_batch_size or n_live != n_disk:
            reject(f"the server serves max_batch_size {live.max_batch_size} with {n_live} instance(s); the file says "
                   f"{disk.max_batch_size} with {n_disk}: load without a config of your own")
        return (f"Triton loaded {model} from disk: max_batch_size {live.max_batch_size}, {n_live} instance(s), "
                "no dynamic_batching")

    return run_check("loaded_from_disk", exercise, answer if not not_here else None,
                     (http_url.split("://")[-1], model), judge, step, strict)


PERF_SWEEP = ("on", "off")


def perf_analyzer_sweep(answer, *, binary, models: Mapping[str, str], address: str, concurrency_range: tuple,
                        requests: int, out_dir, exercise: str, step=None, strict: bool | None = None,
                        fallback_requests: int | None = None, timeout: float = 300.0) -> CheckResult:
    """answer: {"on": line, "off": line} of perf_analyzer command lines, or fn(binary, models, address,
    concurrency_range, requests) returning it; models = {"on": model with dynamic batching, "off": one without}.

    Correct: each line runs `binary` against its model (`-m`) at `address` (`-u`, HTTP) with batch-1 requests over
    `--concurrency-range lo:hi:step`, in windows of `requests` requests (`--measurement-mode count_windows
    --measurement-request-count`), and the two lines differ in nothing else. The check then runs them, on then off
    (`-f` adds a CSV under `out_dir`; windows that never settle fall back to three windows of `fallback_requests`
    requests (the lines' own window by default), taken as they come: servelab.triton.perf_analyzer.measure), and keeps each
    concurrency's figures in the detail ("rows")."""
    from pathlib import Path

    from servelab.assignments.checks.config_answers import perf_command
    from servelab.errors import CannotRun
    from servelab.triton import perf_analyzer as pa

    lo, hi, step_c = concurrency_range
    span = f"{lo}:{hi}:{step_c}"

    def judge(lines):
        if not isinstance(lines, Mapping):
            reject(f"return a dict of command lines with the keys {', '.join(PERF_SWEEP)}")
        argvs, rests = {}, {}
        for key in PERF_SWEEP:
            _, argv = perf_command(lines, key, PERF_SWEEP, binary, {"-m": models[key], "-u": address,
                                                                    "--concurrency-range": span})
            if pa.option(argv, "-i", "--protocol", default="http") != "http":
                reject(f'"{key}" speaks -i {pa.option(argv, "-i", "--protocol")}; this sweep is over HTTP (-u {address})')
            if pa.option(argv, "--measurement-mode") != "count_windows":
                reject(f'"{key}": without --measurement-mode count_windows perf_analyzer measures windows of 5 s and '
                       "ignores --measurement-request-count")
            if pa.option(argv, "--measurement-request-count") != str(requests):
                reject(f'"{key}": --measurement-request-count {pa.option(argv, "--measurement-request-count")}; '
                       f"this sweep's windows are of {requests} requests")
            if pa.option(argv, "-f") or pa.option(argv, "--request-count"):
                reject(f'"{key}": leave out -f and --request-count: the check adds the CSV, and perf_analyzer reads '
                       "a --request-count over its elapsed time rounded up to whole seconds")
            argvs[key] = argv
            words = list(argv[1:])
            k = words.index("-m") if "-m" in words else None
            rests[key] = sorted(words[:k] + words[k + 2:]) if k is not None else sorted(words)
        if rests["on"] != rests["off"]:
            reject("the two lines differ beyond the model: keep every other option the same, or the table compares "
                   "those too")
        rows = []
        for key in PERF_SWEEP:
            csv = Path(out_dir) / f"perf-analyzer-{exercise}-{key}.csv"
            try:
                results = pa.measure(argvs[key] + ["-f", str(csv)], csv, fallback_requests=fallback_requests or requests,
                                     timeout=timeout)
            except CannotRun as exc:
                reject(f'"{key}" did not run: {exc}')
            rows += [{"batching": key, "model": models[key], "concurrency": r.concurrency,
                      "throughput_img_s": r.throughput_img_s, "latency_p50_ms": r.latency_p50_ms,
                      "latency_p99_ms": r.latency_p99_ms, "server_queue_ms": r.server_queue_ms,
                      "server_compute_ms": r.server_compute_ms, "counted": r.counted} for r in results]
        levels = {key: sorted(r["concurrency"] for r in rows if r["batching"] == key) for key in PERF_SWEEP}
        if levels["on"] != list(range(lo, hi + 1, step_c)) or levels["off"] != levels["on"]:
            reject(f"perf_analyzer reported concurrencies {levels}, not {span}")
        counted = sorted({r["counted"] for r in rows if r["counted"]})
        return (f"ran both lines: concurrency {span}, batching on ({models['on']}) and off ({models['off']})"
                + (f"; windows that never settled fell back to three windows of {counted[0]} requests, taken as they "
                   "came" if counted else ""),
                {"rows": rows})

    return run_check("perf_analyzer_sweep", exercise, answer, (binary, dict(models), address, concurrency_range,
                                                               requests), judge, step, strict)


def stats_avg_batch(answer, *, http_url: str, model: str, sweep, exercise: str, step=None,
                    strict: bool | None = None) -> CheckResult:
    """answer: fn(http_url, model, sweep) that reads `GET <http_url>/v2/models/<model>/versions/1/stats`, calls
    `sweep()` (a load on that model), reads it again and returns the sweep's average executed batch: the
    inference_count delta over the execution_count delta.

    The check reads the same counters itself around the call (servelab.lab.triton_by_hand.ModelCounts) and runs
    `sweep` itself when the function did not (so the lesson goes on). Correct: the sweep ran once, and the number
    matches the check's counts over the same interval."""
    from servelab.lab.triton_by_hand import ModelCounts

    calls = []

    def counted_sweep():
        calls.append(1)
        return sweep()

    before = ModelCounts.read(http_url, model)

    result_holder = {"by_check": False}

    def judge(value):
        after = result_holder["after"]
        got = after.since(before)
        if result_holder["by_check"]:
            reject("your function never called sweep(): read the counters, call sweep(), read them again")
        if len(calls) > 1:
            reject(f"your function called sweep() {len(calls)} times: once, between the two reads")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            reject(f"return the average executed batch as a number, got {value!r}")
        total = after.inferences / max(after.executions, 1)
        if abs(value - got.avg_batch) <= 1e-6 * max(1.0, got.avg_batch):
            return (f"{value:.3f} images per execution: {got.inferences} inferences in {got.executions} executions "
                    "during the sweep", {"avg_batch": got.avg_batch, "inferences": got.inferences,
                                         "executions": got.executions})
        if got.avg_batch and abs(value * got.avg_batch - 1) < 1e-6:
            reject("that is executions per inference: divide inference_count by execution_count")
        if abs(value - total) <= 1e-6 * max(1.0, total):
            reject("that is the ratio of the counters since the server started: subtract the read before the sweep "
                   "from the read after it")
        reject(f"{value!r} is not the sweep's inferences per execution: take both counters' deltas between your "
               "two reads (inference_count and execution_count of model_stats[0])")

    class _Answer:
        def __call__(self, url, name, _sweep):
            try:
                return answer(url, name, _sweep)
            finally:
                if not calls:
                    result_holder["by_check"] = True
                    counted_sweep()
                result_holder["after"] = ModelCounts.read(http_url, model)

    return run_check("stats_avg_batch", exercise, _Answer(), (http_url, model, counted_sweep), judge, step, strict)
