"""Check functions for the lab's exercises: each verifies a student's answer against this run's own table
(or Triton's config schema) and prints PASS or a hint that never contains the expected answer.

Every check takes `answer` first — a value, or the student's exercise function, which the check calls with
the inputs listed in its docstring — then the data, then keywords: `exercise="04.1"` (the id the grader
reports), `step=step` (the notebook's servelab.lab.step.Step: results are also recorded under its out_dir),
`strict=None` (raise ExerciseFailed on a failure; default from SERVELAB_CHECKS_STRICT). Each returns the
CheckResult. The expected answer is computed inside the check from the same table the notebook shows, so a
check passes for whatever this run measured — there is no answer key.

Tables may be DataFrames or lists of dicts (records). Column names follow the bench records
(`latency_p99_ms`, `throughput_img_s`, `bytes_per_request`, …); where a notebook names a column differently
it passes the name explicitly.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from servelab.assignments.result import CheckResult, NotRunHere, reject, run_check
from servelab.bench.report import Reading, Why, said
from servelab.bench.report import margin as ranking_margin

__all__ = [
    "outcome", "live_config", "p99_budget", "emulated_plan", "triton_client_call", "python_backend_execute", "fastapi_route",
    "queue_delay_for_budget", "batching_stanza", "gpu_instance_group", "trt_accelerator_stanza",
    "smallest_payload", "best_choice", "speedup", "difference", "share", "scaling_efficiency", "cost_per_1k_images",
    "threshold_for_precision", "replicas_for_load", "execution_providers", "k8s_probes", "compose_healthcheck",
]


# --- helpers ---------------------------------------------------------------------------------------------

def _frame(table) -> pd.DataFrame:
    df = table.copy() if isinstance(table, pd.DataFrame) else pd.DataFrame(list(table))
    if df.empty:
        raise ValueError("the check got an empty table: run the measuring cells above first")
    return df


def _col(df: pd.DataFrame, *names: str) -> str:
    for n in names:
        if n and n in df.columns:
            return n
    raise ValueError(f"the table has none of the columns {', '.join(n for n in names if n)} "
                     f"(it has: {', '.join(map(str, df.columns))})")


def _where(df: pd.DataFrame, at: Mapping | None) -> pd.DataFrame:
    for k, v in (at or {}).items():
        df = df[df[k] == v]
    if df.empty:
        raise ValueError(f"no rows of the table match {dict(at)}")
    return df


def _at(at: Mapping | None) -> str:
    """' at provider=cpu, batch=4' for messages."""
    return (" at " + ", ".join(f"{k}={v}" for k, v in at.items())) if at else ""


def _number(value, what: str) -> float:
    if isinstance(value, bool) or value is None:
        reject(f"{what} should be a number, got {value!r}")
    try:
        x = float(value)
    except (TypeError, ValueError):
        reject(f"{what} should be a number, got {type(value).__name__} {value!r}")
    if math.isnan(x):
        reject(f"{what} is NaN: check for empty selections or divisions by zero")
    return x


def _close(a: float, b: float, rel: float, abs_: float = 0.0) -> bool:
    return math.isclose(a, b, rel_tol=rel, abs_tol=abs_)


def _norm(v) -> str:
    return str(v).strip().lower()


def _parse_config(text, what: str = "your stanza"):
    """A config.pbtxt fragment -> Triton's ModelConfig protobuf, or a hint naming the parse error."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    if not isinstance(text, str) or not text.strip():
        reject(f"{what} is empty: write it as config.pbtxt text (a string)")
    try:
        return text_format.Parse(text, model_config_pb2.ModelConfig())
    except text_format.ParseError as exc:
        reject(f"Triton would not load {what}: {exc} (field and enum names are in Triton's model_config.proto)")


def _kind_name(kind: int) -> str:
    from tritonclient.grpc import model_config_pb2

    return model_config_pb2.ModelInstanceGroup.Kind.Name(kind)


# --- measured spread: a difference inside it is no difference ----------------------------------------------------

def measured_bands(table, *, key: str, metric: str = "throughput_img_s", at: Mapping | None = None) -> pd.DataFrame:
    """Per value of `key`: the mean `metric` and the band [lo, hi] this run measured around it.

    Each row's band is the bench's own (servelab.bench.report.band: the window min–max of throughput and p50,
    `<metric>_min` / `<metric>_max` fields, per-window lists); a metric the bench gives no band (a p99) takes
    the row's relative window spread (`spread`, (max−min)/mean of the window throughputs) — in a closed loop
    latency moves with 1/throughput, so the relative spreads match. Rows of one key pool their bands. A
    single row without any of these has a band of zero width (`source` says so). `settled`: whether every row's
    windows settled (None where the table does not say)."""
    from servelab.bench.report import band

    df = _where(_frame(table), at)
    out = []
    for k, rows in df.groupby(key, sort=False):
        vals, los, his, source = [], [], [], "one value (no spread measured)"
        settled = [row.get("stable") for _, row in rows.iterrows() if row.get("stable") is not None
                   and not pd.isna(row.get("stable"))]
        for _, row in rows.iterrows():
            if pd.isna(pd.to_numeric(row.get(metric), errors="coerce")):
                continue
            v, lo, hi = band(row, metric)
            if lo == hi and "spread" in row and not pd.isna(pd.to_numeric(row.get("spread"), errors="coerce")):
                half = float(row["spread"]) / 2 * v
                lo, hi, source = v - half, v + half, "window spread"
            elif lo != hi:
                source = "windows"
            vals.append(v)
            los.append(lo)
            his.append(hi)
        if not vals:
            continue
        if len(vals) > 1 and source.startswith("one value"):
            source = "rows"
        out.append({key: k, "value": sum(vals) / len(vals), "lo": min(los + vals), "hi": max(his + vals),
                    "source": source, "settled": (all(bool(x) for x in settled) if settled else None)})
    cols = ["value", "lo", "hi", "source", "settled"]
    return pd.DataFrame(out).set_index(key) if out else pd.DataFrame(columns=cols)


def reading(bands: pd.DataFrame, a, b, higher_is_better: bool = True):
    """The run's reading of `a` against `b` from `measured_bands` (servelab.bench.report.apart_reading's rule, so a
    check and the sentence under it agree): ranges that overlap are too close to call; ranges apart give a
    direction, ranked when the lead exceeds the run's margin and both settled. A table that records no spread
    for any row is read as exact numbers."""
    from servelab.bench.report import read_apart

    ra, rb = bands.loc[a], bands.loc[b]
    exact = not any(str(x) != "one value (no spread measured)" for x in bands["source"])
    spread = tuple(exact or r["source"] != "one value (no spread measured)" for r in (ra, rb))

    def settled(r):
        x = r.get("settled")
        return None if x is None or pd.isna(x) else bool(x)

    return read_apart((ra["value"], ra["lo"], ra["hi"]), (rb["value"], rb["lo"], rb["hi"]), margin=ranking_margin(),
                      higher_is_better=higher_is_better, settled=(settled(ra), settled(rb)), spread=spread)


def _verdict(bands: pd.DataFrame, a, b, higher_is_better: bool) -> str:
    """`a` or `b` when every window of one lies better than every window of the other (ranked or a consistent
    lead below the margin), or "tie" when `reading` finds them too close to call."""
    return reading(bands, a, b, higher_is_better).side(a, b, TIE)


TIE = "tie"


def outcome(answer, table, *, key: str, a, b, metric: str = "throughput_img_s", higher_is_better: bool = True,
            at: Mapping | None = None, prediction=None, exercise: str, step=None, strict: bool | None = None) -> CheckResult:
    """Predict, then measure. answer: fn(bands) -> `a`, `b` or "tie", where bands = measured_bands(table,
    key=key, metric=metric, at=at) (columns value, lo, hi; one row per `key`), or that value itself.

    Correct: the side whose band lies wholly better than the other's, or "tie" when the two bands overlap (a
    difference inside the measured spread is no difference) — the reading the run's sentences use
    (`reading`); the message says it in the same words: ranked, or a lead below the run's margin with its size. `prediction` — what the student wrote down before
    the measurement — is not graded: the result says whether it held, and keeps it for the instructor."""
    bands = measured_bands(table, key=key, metric=metric, at=at)
    for k in (a, b):
        if k not in bands.index:
            raise ValueError(f"no {key}={k} rows with {metric} in the table (has {', '.join(map(str, bands.index))})")
    bands = bands.loc[[a, b]]
    read = reading(bands, a, b, higher_is_better)
    expected = read.side(a, b, TIE)
    choices = {_norm(a): a, _norm(b): b, TIE: TIE}
    better = "higher" if higher_is_better else "lower"

    pdetail = _prediction_detail(prediction, expected, choices)
    hidden = {"prediction": pdetail["prediction"]}  # a failed answer's record names no outcome

    def judge(value):
        if value is None or _norm(value) not in choices:
            reject(f"answer with {a!r}, {b!r} or {TIE!r}, got {value!r}", hidden)
        got = choices[_norm(value)]
        if got != expected:
            if expected == TIE and read.why is Why.NO_SPREAD:
                reject("this table records no spread for one of the two: a single window cannot be told from noise",
                       hidden)
            if expected == TIE:
                reject("the two measured bands overlap: a difference inside the spread is no difference", hidden)
            if got == TIE:
                reject("the two bands do not overlap here: every window of one side is better than every window of "
                       "the other — a difference, even where it is small", hidden)
            reject(f"look at which band is better: for {metric}, {better} is better", hidden)
        ra, rb = bands.loc[a], bands.loc[b]
        text = (f"{a}: {metric} {ra['value']:.4g} [{ra['lo']:.4g}–{ra['hi']:.4g}], {b}: {rb['value']:.4g} "
                f"[{rb['lo']:.4g}–{rb['hi']:.4g}]{_at(at)} → {expected} ({said(read, a, b, interleaved=False)})")
        return text + _prediction_note(prediction, expected, choices), pdetail

    return run_check("outcome", exercise, answer, (bands,), judge, step, strict)


def _prediction_note(prediction, expected, choices) -> str:
    if prediction is None or _norm(prediction) not in choices:
        return "; no prediction was written down before the measurement"
    held = choices[_norm(prediction)] == expected
    return f"; your prediction ({prediction}) {'held' if held else 'did not hold — explain why in a sentence'}"


def _prediction_detail(prediction, expected, choices) -> dict:
    made = prediction is not None and _norm(prediction) in choices
    return {"prediction": prediction if made else None, "measured": expected,
            "prediction_held": (choices[_norm(prediction)] == expected) if made else None}


# --- 04 / 05a: dynamic batching ----------------------------------------------------------------------------

def queue_delay_for_budget(answer, grid, budget_ms: float, *, concurrency: int | None = None,
                           delay_col: str | None = None, latency_col: str = "latency_p99_ms",
                           throughput_col: str = "throughput_img_s", rel_tol: float = 0.02,
                           exercise: str, step=None, strict: bool | None = None) -> CheckResult:
    """answer: max_queue_delay_microseconds (int), or fn(grid, budget_ms) -> int; None if no delay fits.

    Correct: a delay of the grid whose latency is within `budget_ms` — at `concurrency`, or at every
    concurrency measured when None — and whose throughput (at `concurrency`, or at the highest concurrency
    measured, where batching matters) is the best among those, within `rel_tol`. Repeated rows are averaged."""
    df = _frame(grid)
    dcol = delay_col or _col(df, "queue_delay_us", "max_queue_delay_us", "max_delay_us", "delay_us")
    ccol = _col(df, "concurrency")
    if concurrency is not None:
        df = _where(df, {ccol: concurrency})
    cell = df.groupby([dcol, ccol])[[latency_col, throughput_col]].mean().reset_index()
    top = cell[ccol].max()
    per = cell.groupby(dcol).agg(lat=(latency_col, "max"))
    per["thr"] = cell[cell[ccol] == top].set_index(dcol)[throughput_col].reindex(per.index)
    within = per[per["lat"] <= budget_ms]
    at = f"at concurrency {concurrency}" if concurrency is not None else "at every concurrency measured"
    bands = measured_bands(df[df[ccol] == top], key=dcol, metric=throughput_col)  # a tie inside the spread

    def judge(value):
        if value is None:
            if within.empty:
                return f"no delay in this run's grid keeps {latency_col} within {budget_ms:g} ms {at}"
            reject(f"at least one measured delay keeps {latency_col} within {budget_ms:g} ms {at}; look again")
        d = _number(value, "max_queue_delay_microseconds")
        if d not in per.index:
            reject(f"{d:g} µs is not a delay this run measured: choose one of the grid's `{dcol}` values")
        if within.empty:
            reject(f"no delay meets {budget_ms:g} ms {at} in this run: the right answer is None")
        row = per.loc[d]
        if row["lat"] > budget_ms:
            reject(f"with {d:g} µs the {latency_col} {at} was {row['lat']:.1f} ms, over the {budget_ms:g} ms budget")
        best = within["thr"].max()
        leader = within["thr"].idxmax()
        tied = d in bands.index and leader in bands.index and reading(bands, d, leader).ahead in (None, "a")
        if not (tied or row["thr"] >= best * (1 - rel_tol)):
            reject(f"{d:g} µs meets the budget, but another delay that also meets it gave clearly more "
                   f"{throughput_col} (beyond the measured spread): compare throughput among the rows within budget")
        return (f"{d:g} µs keeps {latency_col} ≤ {row['lat']:.1f} ms (budget {budget_ms:g} ms) {at} "
                f"with {row['thr']:.1f} img/s at concurrency {top:g}, the best throughput within budget")

    return run_check("queue_delay_for_budget", exercise, answer, (grid, budget_ms), judge, step, strict)


def batching_stanza(answer, *, max_batch: int, kind: str = "KIND_CPU", count: int | None = None,
                    max_delay_us: int | None = None, exercise: str, step=None,
                    strict: bool | None = None) -> CheckResult:
    """answer: config.pbtxt text with `dynamic_batching { … }` and `instance_group [ … ]`, or fn(max_batch) -> text.

    Correct: parses as Triton's ModelConfig; dynamic batching with preferred sizes in 1..max_batch and a
    positive max_queue_delay_microseconds (equal to `max_delay_us` when given); every instance group of
    `kind`, with `count` instances in total when given; a max_batch_size, if written, equal to max_batch."""

    def judge(text):
        return "valid ModelConfig: " + _batching_rules(_parse_config(text), max_batch, kind, count, max_delay_us)

    return run_check("batching_stanza", exercise, answer, (max_batch,), judge, step, strict)


def _batching_rules(cfg, max_batch: int, kind: str, count: int | None, max_delay_us: int | None) -> str:
    """The rules of a dynamic_batching + instance_group stanza (rejects with a hint); returns a summary."""
    if cfg.max_batch_size and cfg.max_batch_size != max_batch:
        reject(f"max_batch_size {cfg.max_batch_size} differs from this model's {max_batch}; leave it out or match it")
    if not cfg.HasField("dynamic_batching"):
        reject("there is no dynamic_batching stanza: without it Triton runs each request on its own")
    db = cfg.dynamic_batching
    bad = [s for s in db.preferred_batch_size if not 1 <= s <= max_batch]
    if bad:
        reject(f"preferred_batch_size {bad} outside 1..max_batch_size ({max_batch}): Triton refuses the config")
    if db.max_queue_delay_microseconds <= 0:
        reject("max_queue_delay_microseconds is 0 or missing: requests would not wait for each other")
    if max_delay_us is not None and db.max_queue_delay_microseconds != max_delay_us:
        reject(f"max_queue_delay_microseconds is {db.max_queue_delay_microseconds}; use the delay the exercise asks for")
    if not cfg.instance_group:
        reject("there is no instance_group: say where the model runs and how many copies")
    kinds = {_kind_name(g.kind) for g in cfg.instance_group}
    if kinds != {kind}:
        reject(f"instance_group kind {', '.join(sorted(kinds))}: this deployment needs {kind}")
    total = sum(max(g.count, 1) * (len(g.gpus) if g.gpus else 1) for g in cfg.instance_group)
    if count is not None and total != count:
        reject(f"your instance_group gives {total} instance(s); the exercise asks for {count}")
    pref = ", ".join(map(str, db.preferred_batch_size)) or "none"
    return f"dynamic batching (preferred {pref}, delay {db.max_queue_delay_microseconds} µs), {total} × {kind}"


def gpu_instance_group(answer, *, gpus: Iterable[int], per_gpu: int, exercise: str, step=None,
                       strict: bool | None = None) -> CheckResult:
    """answer: config.pbtxt text with `instance_group [ … ]`, or fn(gpus, per_gpu) -> text.

    Correct: KIND_GPU groups whose explicit `gpus` lists cover exactly `gpus`, giving `per_gpu` instances on
    each (note `count: N` without `gpus` means N on *every* visible GPU)."""
    gpus = list(gpus)

    def judge(text):
        cfg = _parse_config(text)
        if not cfg.instance_group:
            reject("there is no instance_group stanza")
        on: dict[int, int] = {}
        for g in cfg.instance_group:
            if _kind_name(g.kind) != "KIND_GPU":
                reject(f"a group has kind {_kind_name(g.kind)}: these instances must run on GPUs (KIND_GPU)")
            if not g.gpus:
                reject("a group has no `gpus` list: `count` then applies to every visible GPU; list the GPUs explicitly")
            for gpu in g.gpus:
                on[gpu] = on.get(gpu, 0) + max(g.count, 1)
        extra = sorted(set(on) - set(gpus))
        if extra:
            reject(f"instances on GPU(s) {extra}, which this exercise does not use")
        wrong = {k: v for k, v in on.items() if v != per_gpu}
        missing = sorted(set(gpus) - set(on))
        if missing:
            reject(f"GPU(s) {missing} get no instance")
        if wrong:
            reject(f"GPU(s) {sorted(wrong)} get {sorted(set(wrong.values()))} instance(s); the exercise asks for {per_gpu} each")
        return f"{per_gpu} instance(s) on each of GPUs {gpus}: {per_gpu * len(gpus)} in total"

    return run_check("gpu_instance_group", exercise, answer, (gpus, per_gpu), judge, step, strict)


def trt_accelerator_stanza(answer, *, max_batch: int, cache_path: str, input_name: str = "pixel_values",
                           exercise: str, step=None, strict: bool | None = None) -> CheckResult:
    """answer: config.pbtxt text with `optimization { execution_accelerators { … } }`, or fn(max_batch, cache_path).

    Correct: a `tensorrt` GPU accelerator with FP16, engine cache enabled at `cache_path`, and a profile whose
    min batch is 1 and max batch is max_batch (opt in between), all for input `input_name`."""

    def judge(text):
        from servelab.triton.tensorrt import accelerator_params, stanza_rules

        cfg = _parse_config(text)
        for rule in stanza_rules(cfg, max_batch=max_batch, cache_path=cache_path, input_name=input_name):
            if not rule.ok:
                reject(rule.hint)
        opt = accelerator_params(cfg)["trt_profile_opt_shapes"].partition(":")[2].split("x", 1)[0]
        return f"TensorRT fp16 with engine cache at {cache_path}, profile batch 1…{max_batch} (opt {opt})"

    return run_check("trt_accelerator_stanza", exercise, answer, (max_batch, cache_path), judge, step, strict)


# --- choosing from a measured table -----------------------------------------------------------------------

def smallest_payload(answer, table, *, batch: int | None = None, among: Iterable[str] | None = None,
                     bytes_col: str | None = None, exercise: str, step=None, strict: bool | None = None) -> CheckResult:
    """answer: the payload name (as in the table's `payload` column), or fn(table) -> name.

    Correct: the payload with the fewest bytes per request (at `batch` when given; else summed over the
    table's batches), among `among` when given."""
    df = _frame(table)
    bcol = bytes_col or _col(df, "bytes_per_request", "bytes_per_image", "payload_bytes", "bytes")
    pcol = _col(df, "payload")
    if batch is not None:
        df = _where(df, {_col(df, "batch"): batch})
    if among is not None:
        df = df[df[pcol].map(_norm).isin({_norm(a) for a in among})]
    size = df.groupby(df[pcol].map(_norm))[bcol].sum()

    def judge(value):
        if not isinstance(value, str):
            reject(f"answer with the payload's name from the table's `{pcol}` column, got {value!r}")
        v = _norm(value)
        if v not in size.index:
            reject(f"{value!r} is not one of the payloads compared here: use a name from the `{pcol}` column")
        if size[v] > size.min():
            ratio = size[v] / size.min()
            reject(f"{value} is {ratio:.1f}× the size of the smallest payload in this table: compare the `{bcol}` column")
        return f"{value}: {size[v]:,.0f} bytes" + (f" at batch {batch}" if batch is not None else "") + ", the smallest"

    return run_check("smallest_payload", exercise, answer, (table,), judge, step, strict)


def best_choice(answer, table, *, key: str, metric: str, mode: str = "max", at: Mapping | None = None,
                rel_tol: float = 0.0, exercise: str, step=None, strict: bool | None = None) -> CheckResult:
    """answer: a value of column `key` (a backend, a batch size, a protocol …), or fn(table) -> value.

    Correct: the `key` whose row (restricted to `at`, e.g. {"concurrency": 16}) has the highest (`mode="max"`)
    or lowest (`"min"`) `metric`; answers within `rel_tol` of the best are accepted too, and so is any whose
    band the run's reading (`reading`) finds too close to the best's to call. A lead in every window below the
    run's margin still names the best (the message gives its size)."""
    if mode not in ("max", "min"):
        raise ValueError("mode must be 'max' or 'min'")
    df = _where(_frame(table), at)
    agg = df.groupby(df[key].map(_norm))[metric].agg(mode)
    best = agg.max() if mode == "max" else agg.min()
    word = "highest" if mode == "max" else "lowest"
    band = measured_bands(df, key=key, metric=metric)
    band.index = band.index.map(_norm)
    top_key = agg.idxmax() if mode == "max" else agg.idxmin()
    read = {k: reading(band, top_key, k, higher_is_better=mode == "max") for k in band.index if k != top_key}
    tied = {top_key} | {k for k, v in read.items() if v.ahead is None}
    small = {k: v for k, v in read.items() if v.reading is Reading.CONSISTENT}

    def judge(value):
        v = _norm(value)
        if v not in agg.index:
            try:  # numeric keys: 16 and "16" and 16.0 name the same batch size
                v = next(k for k in agg.index if float(k) == float(value))
            except (StopIteration, TypeError, ValueError):
                reject(f"{value!r} is not a {key} measured here: use a value from the table's `{key}` column")
        got = agg[v]
        ok = got >= best * (1 - rel_tol) if mode == "max" else got <= best * (1 + rel_tol)
        where = _at(at)
        if v in tied and len(tied) > 1:
            others = len(tied) - 1
            return (f"{key} {value}: {metric} {got:.4g}{where}, tied with {others} other(s) whose measured band "
                    f"overlaps the best one: inside the spread, they are equally good in this run")
        if not ok:
            reject(f"{key} {value} has {metric} {got:.4g}{where}; another {key} in this table has a {word} value "
                   f"clearly outside the measured spread")
        runners = "; ".join(said(small[k], str(value), str(k), interleaved=False) for k in small) if v == top_key else ""
        return f"{key} {value}: {metric} {got:.4g}{where}, the {word} in this run" + (f" ({runners})" if runners else "")

    return run_check("best_choice", exercise, answer, (table,), judge, step, strict)


def speedup(answer, table, *, key: str, fast, slow, metric: str = "throughput_img_s", at: Mapping | None = None,
            higher_is_better: bool = True, rel_tol: float = 0.02, exercise: str, step=None,
            strict: bool | None = None) -> CheckResult:
    """answer: how many times better `fast` is than `slow` on `metric` (a ratio, e.g. 1.3), or fn(table).

    For throughput (higher is better) that is fast/slow; for a latency (`higher_is_better=False`) slow/fast.
    `at` selects the rows compared (e.g. {"batch": 8, "concurrency": 1}); several matching rows are averaged."""
    df = _where(_frame(table), at)
    by = df.groupby(df[key].map(_norm))[metric].mean()
    for k in (fast, slow):
        if _norm(k) not in by.index:
            raise ValueError(f"no {key}={k} rows in the table (has {', '.join(by.index)})")
    f, s = by[_norm(fast)], by[_norm(slow)]
    expected = f / s if higher_is_better else s / f

    def judge(value):
        x = _number(value, "the speed-up")
        if _close(x, expected, rel_tol):
            return f"{fast} vs {slow}: {x:.3g}× on {metric}" + _at(at)
        if expected and _close(x, 1 / expected, rel_tol):
            reject("that is the ratio the wrong way round: how many times better is the first than the second?")
        if _close(x, expected * 100, rel_tol) or _close(x, (expected - 1) * 100, rel_tol):
            reject("give a ratio (e.g. 1.25 = 25 % better), not a percentage")
        reject(f"{x:.3g} does not match this run's table: divide the two {metric} values at the rows asked for")

    return run_check("speedup", exercise, answer, (table,), judge, step, strict)


def difference(answer, table, *, key: str, a, b, metric: str = "latency_p50_ms", at: Mapping | None = None,
               unit: str = "ms", rel_tol: float = 0.02, abs_tol: float = 0.05, exercise: str, step=None,
               strict: bool | None = None) -> CheckResult:
    """answer: `metric` of `a` minus `metric` of `b` (e.g. what the network hop adds to p50: service minus
    in-process), or fn(table). `at` selects the rows compared; several matching rows are averaged."""
    df = _where(_frame(table), at)
    by = df.groupby(df[key].map(_norm))[metric].mean()
    for k in (a, b):
        if _norm(k) not in by.index:
            raise ValueError(f"no {key}={k} rows in the table (has {', '.join(by.index)})")
    expected = float(by[_norm(a)] - by[_norm(b)])

    def judge(value):
        x = _number(value, "the difference")
        if _close(x, expected, rel_tol, abs_tol):
            return f"{a} − {b}: {x:+.3g} {unit} on {metric}" + _at(at)
        if _close(x, -expected, rel_tol, abs_tol):
            reject(f"the sign is reversed: subtract {b}'s {metric} from {a}'s")
        if by[_norm(b)] and _close(x, by[_norm(a)] / by[_norm(b)], rel_tol):
            reject("that is a ratio; the question asks for a difference in " + unit)
        reject(f"{x:.3g} does not match this run's table: subtract the two {metric} values at the rows asked for")

    return run_check("difference", exercise, answer, (table,), judge, step, strict)


def share(answer, table, *, part: str, whole: str, at: Mapping | None = None, rel_tol: float = 0.02,
          abs_tol: float = 0.005, exercise: str, step=None, strict: bool | None = None) -> CheckResult:
    """answer: the fraction column `part` is of column `whole` (0…1, e.g. the share of the client's latency
    spent outside the server), or fn(table). `at` selects the rows; several matching rows are averaged."""
    df = _where(_frame(table), at)
    p, w = float(df[part].mean()), float(df[whole].mean())
    if not w:
        raise ValueError(f"{whole} is 0 in the rows selected: the share is undefined")
    expected = p / w

    def judge(value):
        x = _number(value, "the share")
        if _close(x, expected, rel_tol, abs_tol):
            return f"{part} is {x:.1%} of {whole}" + _at(at)
        if _close(x, expected * 100, rel_tol, abs_tol * 100):
            reject("give a fraction between 0 and 1, not a percentage")
        if _close(x, 1 - expected, rel_tol, abs_tol):
            reject(f"that is the rest: the share of {whole} that is *not* {part}")
        if p and _close(x, w / p, rel_tol):
            reject(f"upside down: divide {part} by {whole}")
        reject(f"{x:.3g} does not match this run's table: divide {part} by {whole} at the rows asked for")

    return run_check("share", exercise, answer, (table,), judge, step, strict)


def scaling_efficiency(answer, table, *, units_col: str = "instances", throughput_col: str = "throughput_img_s",
                       abs_tol: float = 0.01, exercise: str, step=None, strict: bool | None = None) -> CheckResult:
    """answer: efficiency per unit count — {n: efficiency}, a Series indexed by n, or a list in increasing n —
    or fn(table). Efficiency(n) = throughput(n) / ((n / n0) · throughput(n0)), n0 the smallest count measured
    (1.0 = perfect linear scaling); with several rows per n the best throughput counts."""
    df = _frame(table)
    thr = df.groupby(units_col)[throughput_col].max().sort_index()
    n0, t0 = thr.index[0], thr.iloc[0]
    expected = {n: float(t / ((n / n0) * t0)) for n, t in thr.items()}

    def as_map(value) -> dict:
        if isinstance(value, pd.DataFrame):
            col = next((c for c in value.columns if "eff" in str(c).lower()), None)
            if col is None or units_col not in value.columns:
                reject(f"a DataFrame answer needs columns `{units_col}` and an `efficiency` column")
            return dict(zip(value[units_col], value[col], strict=True))
        if isinstance(value, pd.Series):
            return value.to_dict()
        if isinstance(value, Mapping):
            return dict(value)
        if isinstance(value, (list, tuple)):
            if len(value) != len(expected):
                reject(f"give one efficiency per {units_col} value measured ({len(expected)}), got {len(value)}")
            return dict(zip(expected, value, strict=True))
        reject(f"answer with {{{units_col}: efficiency}}, got {type(value).__name__}")

    def judge(value):
        got = {float(k): _number(v, f"efficiency at {k}") for k, v in as_map(value).items()}
        missing = [n for n in expected if float(n) not in got]
        if missing:
            reject(f"no efficiency for {units_col} {missing}")
        if all(_close(got[float(n)], e * 100, 0.01) for n, e in expected.items()):
            reject("express efficiency as a fraction (1.0 = perfect scaling), not a percentage")
        for n, e in expected.items():
            g = got[float(n)]
            if abs(g - e) > abs_tol:
                speed = e * n / n0
                if abs(g - speed) <= abs_tol and abs(speed - e) > abs_tol:
                    reject(f"at {units_col}={n} that is the speed-up over {n0}; efficiency also divides by how many times the resources grew")
                reject(f"at {units_col}={n} your efficiency {g:.3f} does not match this run's throughput table")
        return ", ".join(f"{n}: {got[float(n)]:.2f}" for n in expected) + f" (throughput relative to {n0} × linear)"

    return run_check("scaling_efficiency", exercise, answer, (table,), judge, step, strict)


def cost_per_1k_images(answer, *, throughput_img_s: float, price_per_hour: float, rel_tol: float = 0.01,
                       exercise: str, step=None, strict: bool | None = None) -> CheckResult:
    """answer: what 1,000 images cost at this throughput and hourly price, or fn(throughput_img_s, price_per_hour).
    Correct: price_per_hour / (throughput_img_s · 3600) · 1000."""
    expected = price_per_hour / (throughput_img_s * 3600) * 1000

    def judge(value):
        x = _number(value, "the cost per 1,000 images")
        if _close(x, expected, rel_tol):
            return f"{x:.4g} per 1,000 images at {throughput_img_s:.1f} img/s and {price_per_hour:g}/hour"
        if _close(x, expected * 3600, rel_tol) or _close(x, expected * 60, rel_tol):
            reject("the price is per hour and the throughput per second: convert one of them")
        if _close(x, expected / 1000, rel_tol):
            reject("that is the cost of one image; the question asks for 1,000")
        reject(f"{x:.4g} does not follow from {throughput_img_s:.1f} img/s at {price_per_hour:g} per hour")

    return run_check("cost_per_1k_images", exercise, answer, (throughput_img_s, price_per_hour), judge, step, strict)


# --- 09: photo finder ---------------------------------------------------------------------------------------

def threshold_for_precision(answer, evaluation, *, target_precision: float, threshold_col: str = "threshold",
                            precision_col: str = "precision", recall_col: str = "recall", exercise: str,
                            step=None, strict: bool | None = None) -> CheckResult:
    """answer: a cosine threshold from the evaluation table, or fn(evaluation, target_precision); None if none fits.

    Correct: among thresholds whose precision ≥ target_precision, one with the highest recall (it finds the
    most true duplicates while staying precise enough). servelab.dedup.evaluate's metrics rows work as they
    are: without a `threshold` column, the embedding rows' `setting` ("cosine >= 0.90") gives it."""
    df = _frame(evaluation)
    if threshold_col not in df.columns and "setting" in df.columns:
        if "method" in df.columns:
            df = df[df["method"] == "embedding"]
        df = df.assign(**{threshold_col: df["setting"].str.extract(r"cosine\s*>=\s*([0-9.]+)")[0].astype(float)})
        df = df.dropna(subset=[threshold_col])
    ev = df.groupby(threshold_col).agg(p=(precision_col, "mean"), r=(recall_col, "mean"))
    ok = ev[ev["p"] >= target_precision]

    def judge(value):
        if value is None:
            if ok.empty:
                return f"no threshold in this evaluation reaches precision {target_precision:g}"
            reject(f"some threshold in this evaluation reaches precision {target_precision:g}")
        t = _number(value, "the threshold")
        hit = [x for x in ev.index if _close(float(x), t, 0, 1e-9)]
        if not hit:
            reject(f"{t:g} is not a threshold of this evaluation table: choose one of its rows")
        row = ev.loc[hit[0]]
        if row["p"] < target_precision:
            reject(f"at {t:g} precision is {row['p']:.3f}, below the {target_precision:g} target: too many false groupings")
        if row["r"] < ok["r"].max() - 1e-12:
            reject(f"{t:g} is precise enough but another threshold also is and finds more duplicates (higher recall)")
        return f"threshold {t:g}: precision {row['p']:.3f} ≥ {target_precision:g} with recall {row['r']:.3f}, the most recall on target"

    return run_check("threshold_for_precision", exercise, answer, (evaluation, target_precision), judge, step, strict)


# --- 08: capacity -----------------------------------------------------------------------------------------------

def replicas_for_load(answer, *, per_replica_img_s: float, target_img_s: float, utilisation: float = 1.0,
                      exercise: str, step=None, strict: bool | None = None) -> CheckResult:
    """answer: replicas needed, or fn(per_replica_img_s, target_img_s, utilisation).
    Correct: ceil(target_img_s / (per_replica_img_s · utilisation)) — each replica run at most at `utilisation`."""
    expected = max(1, math.ceil(target_img_s / (per_replica_img_s * utilisation) - 1e-9))

    def judge(value):
        x = _number(value, "the replica count")
        if x != int(x):
            reject("a replica count is a whole number: round up, a fraction of a pod does not exist")
        if int(x) == expected:
            return (f"{int(x)} replica(s) × {per_replica_img_s:.1f} img/s at ≤{utilisation:.0%} "
                    f"cover {target_img_s:g} img/s")
        if int(x) < expected:
            reject(f"{int(x)} replica(s) at ≤{utilisation:.0%} of {per_replica_img_s:.1f} img/s each do not reach {target_img_s:g} img/s")
        reject(f"{int(x)} replicas reach the target, but fewer would too: round up only once")

    return run_check("replicas_for_load", exercise, answer, (per_replica_img_s, target_img_s, utilisation), judge, step, strict)


def _yaml(text, what: str) -> dict:
    import yaml

    if isinstance(text, Mapping):
        return dict(text)
    if not isinstance(text, str) or not text.strip():
        reject(f"{what} is empty: write it as YAML text")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        reject(f"{what} is not valid YAML: {str(exc).splitlines()[0]}")
    if not isinstance(data, dict):
        reject(f"{what} should be a YAML mapping (key: value lines)")
    return data


def k8s_probes(answer, *, cold_start_s: float, margin: float = 2.0, exercise: str, step=None,
               strict: bool | None = None) -> CheckResult:
    """answer: YAML for the container's `startupProbe`, `readinessProbe` and `livenessProbe`, or fn(cold_start_s).

    Correct: startup asks /readyz (the model loaded within the allowance; the other probes wait for it),
    readiness asks /readyz (take the pod out of the Service while it cannot serve), liveness asks
    /healthz (restart only a dead process — never one that is merely busy or still loading), and the startup
    probe allows at least `margin` × this run's measured cold start (periodSeconds × failureThreshold)."""

    def judge(text):
        spec = _yaml(text, "your probes")
        for name in ("startupProbe", "readinessProbe", "livenessProbe"):
            if not isinstance(spec.get(name), Mapping):
                reject(f"no {name}: write all three under the container")
            if not isinstance(spec[name].get("httpGet"), Mapping) or not spec[name]["httpGet"].get("path"):
                reject(f"{name} needs an httpGet with a path")
        path = {n: spec[n]["httpGet"]["path"] for n in ("startupProbe", "readinessProbe", "livenessProbe")}
        if path["startupProbe"] != "/readyz":
            reject(f"the startup probe asks {path['startupProbe']}, which answers as soon as the process listens: it "
                   "passes while the model is still loading, so its allowance times nothing and a load that hangs is "
                   "never restarted. Ask the endpoint that answers once the model can serve")
        if path["readinessProbe"] != "/readyz":
            reject("the readiness probe should ask the endpoint that says whether the model can serve now")
        if path["livenessProbe"] == "/readyz":
            reject("a liveness probe on readiness restarts pods that are only busy or loading: ask the process-alive endpoint")
        if path["livenessProbe"] != "/healthz":
            reject(f"the liveness probe asks {path['livenessProbe']}, which the service does not serve as a liveness check")
        sp = spec["startupProbe"]
        allowed = float(sp.get("periodSeconds", 10)) * float(sp.get("failureThreshold", 3))
        if allowed < cold_start_s * margin:
            reject(f"the startup probe gives up after {allowed:g} s; this run measured a cold start of "
                   f"{cold_start_s:.1f} s and the probe should allow {margin:g}× that")
        return f"startup and readiness /readyz, liveness /healthz, startup allows {allowed:g} s (cold start here {cold_start_s:.1f} s)"

    return run_check("k8s_probes", exercise, answer, (cold_start_s,), judge, step, strict)


def _seconds(value, what: str) -> float:
    """Compose durations: '30s', '1m30s', '500ms', or a number of seconds."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    text = str(value).strip()
    parts = re.findall(r"(\d+(?:\.\d+)?)(h|ms|m|s|us)", text)
    if not parts or "".join(a + b for a, b in parts) != text:
        reject(f"{what} {value!r} is not a duration like '30s' or '1m30s'")
    scale = {"h": 3600, "m": 60, "s": 1, "ms": 1e-3, "us": 1e-6}
    return sum(float(a) * scale[b] for a, b in parts)


def compose_healthcheck(answer, *, cold_start_s: float, port: int = 8002, margin: float = 1.5,
                        path: str = "/readyz", liveness_path: str = "/healthz", script: str = "healthcheck.py",
                        missing_tools: tuple = ("curl", "wget"), exercise: str, step=None,
                        strict: bool | None = None) -> CheckResult:
    """answer: YAML of a compose service's `healthcheck:` mapping (with or without the `healthcheck:` key), or
    fn(cold_start_s). Correct: a CMD/CMD-SHELL test that asks the service on `port` whether it is ready (`path`;
    or runs the image's own `script`, which does), using no tool the slim image lacks (`missing_tools`), and a
    start_period that covers `margin` × this run's measured cold start (failures during it do not count).
    `liveness_path` is refused with the reason: it answers while the model loads, so `healthy` would come
    before the service can serve and `depends_on: service_healthy` would send it traffic it cannot answer."""

    def judge(text):
        hc = _yaml(text, "your healthcheck")
        hc = hc.get("healthcheck", hc)
        if not isinstance(hc, Mapping) or "test" not in hc:
            reject("a compose healthcheck needs a `test` (e.g. [\"CMD\", …])")
        test = hc["test"]
        cmd = " ".join(map(str, test)) if isinstance(test, list) else str(test)
        if isinstance(test, list) and (not test or test[0] not in ("CMD", "CMD-SHELL")):
            reject("a list `test` starts with \"CMD\" (run a program) or \"CMD-SHELL\" (run a shell line)")
        tools = [t for t in missing_tools if re.search(rf"\b{t}\b", cmd)]
        if tools:
            reject(f"the slim service image has no {tools[0]}: use its Python (the image ships a {script})")
        if script not in cmd:
            if path not in cmd and liveness_path in cmd:
                reject(f"{liveness_path} answers as soon as the process listens, while the model is still loading: "
                       f"Docker would call the container healthy before it can serve. Ask {path} (ready to serve)")
            if path not in cmd:
                reject(f"the test should ask the service whether it is ready to serve ({path})")
            if str(port) not in cmd:
                reject(f"the test runs inside the container: ask the service's own port ({port})")
        if "start_period" not in hc:
            reject("no start_period: failures while the model loads would count against the container")
        sp = _seconds(hc["start_period"], "start_period")
        if sp < cold_start_s * margin:
            reject(f"start_period {sp:g} s is shorter than {margin:g}× the cold start this run measured ({cold_start_s:.1f} s)")
        return f"healthcheck `{cmd}`, start_period {sp:g} s (cold start here {cold_start_s:.1f} s)"

    return run_check("compose_healthcheck", exercise, answer, (cold_start_s,), judge, step, strict)


# --- 03: execution providers -----------------------------------------------------------------------------------

_ORT_NAMES = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider", "tensorrt": "TensorrtExecutionProvider"}


def execution_providers(answer, *, want: str, exercise: str, step=None, strict: bool | None = None) -> CheckResult:
    """answer: the ONNX Runtime providers list for a session that should run on `want` (cpu | cuda | tensorrt),
    or fn(want). Correct: real provider names, `want` first, CUDA behind TensorRT (for the ops TensorRT
    rejects), CPU last."""
    if want not in _ORT_NAMES:
        raise ValueError(f"want must be one of {', '.join(_ORT_NAMES)}")

    def judge(value):
        if isinstance(value, str) or not isinstance(value, (list, tuple)):
            reject("answer with a list of provider names, e.g. the value you would pass as providers=[…]")
        names = [v[0] if isinstance(v, tuple) else v for v in value]
        try:
            import onnxruntime

            known = set(onnxruntime.get_all_providers())
        except ImportError:
            known = set(_ORT_NAMES.values())
        unknown = [n for n in names if n not in known]
        if unknown:
            reject(f"{unknown} not ONNX Runtime provider names (see onnxruntime.get_all_providers())")
        if not names or names[0] != _ORT_NAMES[want]:
            reject(f"ONNX Runtime tries providers in order: the first one should be the {want} provider")
        if names[-1] != _ORT_NAMES["cpu"]:
            reject("end with the CPU provider, so operators the GPU providers cannot take still run")
        if want == "tensorrt" and _ORT_NAMES["cuda"] not in names:
            reject("put CUDA between TensorRT and CPU: sub-graphs TensorRT rejects should still run on the GPU")
        return f"{' → '.join(names)}"

    return run_check("execution_providers", exercise, answer, (want,), judge, step, strict)


# --- applied live: the answer goes into the running stack and is measured or called ------------------------------

def _record_row(rec: dict, label: str) -> dict:
    server = rec.get("server_stats") or {}
    return {"config": label, "throughput_img_s": rec.get("throughput_img_s"),
            "throughput_min_img_s": rec.get("throughput_min_img_s"), "throughput_max_img_s": rec.get("throughput_max_img_s"),
            "window_throughput_img_s": rec.get("window_throughput_img_s"), "latency_p99_ms": rec.get("latency_p99_ms"),
            "avg_batch": server.get("avg_batch"), "errors": rec.get("errors"), "requests": rec.get("requests"),
            "stable": rec.get("stable")}


def _served_ok(rec: dict, what: str) -> None:
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
        cfg = _parse_config(text)
        summary = _batching_rules(cfg, max_batch, kind, count, max_delay_us)

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
        _served_ok(yours, "with your stanza")
        _served_ok(before, "with the default config (before)")
        _served_ok(after, "with the default config (after)")
        rows = pd.DataFrame([_record_row(before, "default"), _record_row(yours, "yours"), _record_row(after, "default")])
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
        _served_ok(rec, f"trial {chosen}")
        p99 = rec["latency_p99_ms"]
        if p99 is None or p99 > budget_ms:
            reject(f"trial {chosen} had p99 {p99:.0f} ms, over the {budget_ms:.0f} ms budget")
        ok = {k: r for k, r in mine.items()
              if not r.get("errors") and r.get("requests") and (r.get("latency_p99_ms") or 1e18) <= budget_ms}
        after = trials.baseline_after()  # bracket the trials: drift on a shared machine moves both ends
        for ref, when in ((baseline, "before"), (after, "after")):
            _served_ok(ref, f"the one-client baseline measured {when} your trials")
        rows = pd.DataFrame([_record_row(r, k) for k, r in ok.items()]
                            + [_record_row(baseline, "baseline"), _record_row(after, "baseline")])
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
        mb, delay, inst = (_number(value[k], k) for k in ("max_batch_size", "max_queue_delay_us", "instances"))
        predicted = _number(value["predicted_img_s"], "predicted_img_s")
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
        _served_ok(yours, "with your plan")
        measured = float(yours["throughput_img_s"])
        server_ms = (yours.get("server_stats") or {}).get("avg_request_ms")
        served = clients / (server_ms / 1000) if server_ms else measured  # Little's law, the server's own time
        client_ms = (yours.get("latency_mean_ms") or 0) - (server_ms or 0)
        ahead, _ = ratio_verdict(ratio)
        figures = (f"your plan (max_batch_size {int(mb)}, queue delay {int(delay)} µs, {int(inst)} instance(s)) "
                   f"serves {clients} clients at {served:.1f} img/s on {device.label} (Triton's own "
                   f"{server_ms or 0:.0f} ms per request; {measured:.1f} img/s end to end, this machine's CPU adding "
                   f"{max(client_ms, 0):.0f} ms around each); you predicted {predicted:.1f}; against the default in "
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
        if not _close(served, predicted, tol):
            reject(f"{figures}: your prediction is more than {tol:.0%} off; from t(B), how many images does one "
                   f"round of {clients} clients take, and in how many batches?", detail)
        return figures, detail

    return run_check("emulated_plan", exercise, answer, (device, clients), judge, step, strict)


def triton_client_call(answer, *, triton_http_url: str, model: str, triton_grpc_url: str | None = None, batch: int = 2,
                       exercise: str, step=None, strict: bool | None = None) -> CheckResult:
    """answer: fn(url, model, pixels) -> embeddings, written by hand with `tritonclient.http` (or, when
    `triton_grpc_url` is given, `tritonclient.grpc`): an InferenceServerClient for `url` (host:port, no scheme),
    an InferInput for `pixel_values` with its data set by set_data_from_numpy, an InferRequestedOutput for
    `embedding`, infer, as_numpy. The function gets the gRPC address when `triton_grpc_url` is given.

    Checked by running it against the running Triton with `batch` preprocessed images: the result must be a
    float32 array of shape (batch, 512) matching, row by row, what servelab's own Triton client gets (over
    HTTP) for the same tensor."""
    from servelab.client import InferenceClient
    from servelab.triton.control import address

    try:
        from servelab.bench.load.inputs import sample_tensor
    except ImportError:  # the bench before its inputs module
        from servelab.bench.load import sample_tensor

    pixels = sample_tensor(batch, seed=7)
    host = address(triton_grpc_url or triton_http_url)
    with InferenceClient(mode="remote", backend="triton-http", url=triton_http_url, payload="tensor", model=model) as c:
        expected = np.asarray(c.embed_tensor(pixels), dtype=np.float32)

    def judge(value):
        if value is None:
            reject("the function returned None: return the `embedding` output as a numpy array")
        got = np.asarray(value)
        if got.shape != expected.shape:
            if got.shape == expected.shape[1:]:
                reject(f"got one vector of shape {got.shape}: return one embedding per image in the batch")
            reject(f"got shape {got.shape}; the batch had {batch} images and each embedding has {expected.shape[1]} values")
        if got.dtype != np.float32:
            reject(f"got dtype {got.dtype}: the model's output is FP32; as_numpy returns it as it is")
        cos = (got * expected).sum(1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(expected, axis=1) + 1e-12)
        if cos.min() < 0.999:
            reject(f"row {int(cos.argmin())} differs from what Triton returns for that image: send the tensor as "
                   f"it is (no reshaping or transposing) and read the `embedding` output")
        return f"{batch} embeddings of {expected.shape[1]} values from {model}, matching servelab's client (min cosine {cos.min():.6f})"

    return run_check("triton_client_call", exercise, answer, (host, model, pixels), judge, step, strict)


L2NORM_CONFIG = """name: "{name}"
backend: "python"
max_batch_size: 8
input [ {{ name: "embedding", data_type: TYPE_FP32, dims: [ 512 ] }} ]
output [ {{ name: "unit_embedding", data_type: TYPE_FP32, dims: [ 512 ] }} ]
dynamic_batching {{ max_queue_delay_microseconds: 200000 }}
instance_group [ {{ kind: KIND_CPU, count: 1 }} ]
"""


def python_backend_execute(answer, *, triton_http_url: str, repository, exercise: str, step=None,
                           strict: bool | None = None) -> CheckResult:
    """answer: the function `execute(self, requests)` of a python-backend TritonPythonModel that L2-normalises
    each request's `embedding` rows ([n, 512] FP32) into `unit_embedding`, returning one InferenceResponse per
    request, in order (the module gives it `np` and `pb_utils`).

    Checked by running it: the function's source becomes model.py of a model staged in `repository` next to the
    lab's models (config: max_batch_size 8, dynamic batching with a 200 ms queue delay), Triton loads it, six
    concurrent requests of 1–3 rows each arrive together (so `execute` gets several requests at once), and each
    response must hold its own request's rows, normalised. The model is unloaded and removed afterwards."""
    from servelab.assignments.live import NotApplied, model_py, python_model
    from servelab.triton.control import address

    name = "exercise_" + re.sub(r"\W", "_", str(exercise)) + "_l2norm"

    def source():
        text = model_py(answer)
        if re.search(r"raise NotImplementedError\(\s*[\"']exercise", text):  # the student stub: nothing to stage yet
            raise NotImplementedError(f"exercise {exercise}: execute still raises NotImplementedError")
        return text

    def judge(text):
        import tritonclient.http as httpclient
        from tritonclient.utils import InferenceServerException

        if not repository or not Path(repository).is_dir():
            raise NotRunHere(f"the running Triton's model repository ({repository or 'not given'}) is not a folder "
                             "on this machine (a remote node): run this exercise against the local stack")

        rng = np.random.default_rng(3)
        batches = [rng.normal(size=(1 + i % 3, 512)).astype(np.float32) for i in range(6)]
        host = address(triton_http_url)
        try:
            with python_model(repository, triton_http_url, name, L2NORM_CONFIG.format(name=name), text):
                client = httpclient.InferenceServerClient(host, concurrency=len(batches), network_timeout=60)
                pending = []
                for x in batches:
                    inp = httpclient.InferInput("embedding", list(x.shape), "FP32")
                    inp.set_data_from_numpy(x)
                    pending.append(client.async_infer(name, [inp], outputs=[httpclient.InferRequestedOutput("unit_embedding")]))
                outs, failures = [], []
                for p in pending:
                    try:
                        outs.append(p.get_result().as_numpy("unit_embedding"))
                    except InferenceServerException as exc:
                        outs.append(None)
                        failures.append(str(exc))
                client.close()
        except NotApplied as exc:
            reject(f"Triton could not load a model with your execute: {exc}")
        if any("NotImplementedError" in f for f in failures):
            raise NotImplementedError(f"exercise {exercise}: execute still raises NotImplementedError")
        if failures:
            first = failures[0].splitlines()[0][:300]
            if "response" in first.lower() and ("count" in first.lower() or "number" in first.lower()):
                reject(f"Triton got the wrong number of responses ({first}): return one response per request")
            reject(f"{len(failures)} of {len(batches)} requests failed: {first}")
        for i, (x, y) in enumerate(zip(batches, outs, strict=True)):
            if y is None or y.shape != x.shape:
                reject(f"request {i} sent {x.shape[0]} row(s) and got back shape {None if y is None else y.shape}: "
                       f"each response must carry its own request's rows")
            want = x / np.linalg.norm(x, axis=1, keepdims=True)
            if not np.allclose(y, want, atol=1e-4):
                if np.allclose(np.linalg.norm(y, axis=1), 1, atol=1e-3):
                    reject(f"request {i} got unit vectors, but not its own rows normalised: keep requests and responses in order")
                reject(f"request {i}: the rows are not the input divided by its L2 norm (norm per row, not per tensor)")
        return f"Triton ran your execute: {len(batches)} concurrent requests, each answered with its own rows normalised"

    return run_check("python_backend_execute", exercise, source, (), judge, step, strict)


def fastapi_route(answer, *, embed_images, photo: bytes, exercise: str, step=None, strict: bool | None = None) -> CheckResult:
    """answer: fn(app, embed_images) that adds `POST /embed-one` to the FastAPI `app`: the request body is one
    image's bytes (Content-Type image/jpeg or image/png); the reply is JSON {"embedding": [512 floats],
    "dim": 512}; a body that is not an image gets a 4xx with a JSON body saying what is wrong, never a 500.
    `embed_images(list_of_bytes)` returns an [n, 512] array (and raises on bytes that are not an image).

    Checked by running it: the app is served by uvicorn on a free loopback port and called over HTTP with a
    JPEG, with bytes that are not an image, and with an empty body."""
    import httpx
    from fastapi import FastAPI

    from servelab.assignments.live import NotApplied, served_app

    app = FastAPI()
    expected = np.asarray(embed_images([photo]))[0]

    def judge(_):
        def post(http, body: bytes):
            try:
                return http.post("/embed-one", content=body, headers={"content-type": "image/jpeg"})
            except httpx.TransportError as exc:  # the app crashed before answering: as bad as a 500
                return httpx.Response(599, text=f"no response: {type(exc).__name__}")

        try:
            with served_app(app) as base, httpx.Client(base_url=base, timeout=60) as http:
                ok, bad, empty = post(http, photo), post(http, b"these bytes are not an image"), post(http, b"")
        except NotApplied as exc:
            reject(str(exc))
        if ok.status_code in (404, 405):
            reject(f"POST /embed-one answered {ok.status_code}: register the route with @app.post on that path")
        if ok.status_code != 200:
            reject(f"a valid JPEG got HTTP {ok.status_code}: {ok.text[:200]}")
        try:
            body = ok.json()
        except ValueError:
            reject("the reply to a valid JPEG is not JSON")
        vec = np.asarray(body.get("embedding") if isinstance(body, dict) else None, dtype=np.float64)
        if vec.shape != expected.shape:
            reject(f"`embedding` should be a list of {expected.shape[0]} numbers, got shape {vec.shape}")
        if isinstance(body, dict) and body.get("dim") != expected.shape[0]:
            reject("`dim` should give the embedding's length")
        cos = float(vec @ expected / (np.linalg.norm(vec) * np.linalg.norm(expected) + 1e-12))
        if cos < 0.999:
            reject("the embedding is not the image's: pass the request body's bytes to embed_images as they are")
        for what, r in (("bytes that are not an image", bad), ("an empty body", empty)):
            if r.status_code >= 500:
                reject(f"{what} made the route fail (HTTP {r.status_code}, a 5xx or no answer): catch the error and "
                       f"answer 4xx with JSON")
            if not 400 <= r.status_code < 500:
                reject(f"{what} got HTTP {r.status_code}: a bad upload is the client's fault (4xx)")
            try:
                r.json()
            except ValueError:
                reject(f"the reply to {what} is not JSON: say what is wrong in a JSON body")
        return (f"POST /embed-one served by uvicorn: 200 with the image's embedding (cosine {cos:.6f}), "
                f"{bad.status_code} for bytes that are not an image, {empty.status_code} for an empty body")

    return run_check("fastapi_route", exercise, answer, (app, embed_images), judge, step, strict)
