"""Check functions for the lab's exercises: each verifies a student's answer against this run's own table
(or Triton's config schema) and prints PASS or a hint that never contains the expected answer.

Every check takes `answer` first — a value, or the student's exercise function, which the check calls with
the inputs listed in its docstring — then the data, then keywords: `exercise="04.1"` (the id the grader
reports), `step=step` (the notebook's servelab.lab.nb.Step: results are also recorded under its out_dir),
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
from typing import Iterable, Mapping

import pandas as pd

from servelab.assignments.result import CheckResult, reject, run_check

__all__ = [
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
        if not row["thr"] >= best * (1 - rel_tol):
            reject(f"{d:g} µs meets the budget, but another delay that also meets it gave clearly more "
                   f"{throughput_col}: compare throughput among the rows within budget")
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
        cfg = _parse_config(text)
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
            reject(f"max_queue_delay_microseconds is {db.max_queue_delay_microseconds}; use the delay chosen above")
        if not cfg.instance_group:
            reject("there is no instance_group: say where the model runs and how many copies")
        kinds = {_kind_name(g.kind) for g in cfg.instance_group}
        if kinds != {kind}:
            reject(f"instance_group kind {', '.join(sorted(kinds))}: this deployment needs {kind}")
        total = sum(max(g.count, 1) * (len(g.gpus) if g.gpus else 1) for g in cfg.instance_group)
        if count is not None and total != count:
            reject(f"your instance_group gives {total} instance(s); the exercise asks for {count}")
        pref = ", ".join(map(str, db.preferred_batch_size)) or "none"
        return (f"valid ModelConfig: dynamic batching (preferred {pref}, delay {db.max_queue_delay_microseconds} µs), "
                f"{total} × {kind}")

    return run_check("batching_stanza", exercise, answer, (max_batch,), judge, step, strict)


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

    def batch_of(value: str, key: str) -> int:
        name, _, dims = value.partition(":")
        if name != input_name or not dims:
            reject(f"{key} should read '{input_name}:<batch>x3x224x224', got {value!r}")
        try:
            return int(dims.split("x", 1)[0])
        except ValueError:
            reject(f"{key}: cannot read a batch size from {value!r}")

    def judge(text):
        cfg = _parse_config(text)
        accs = [a for a in cfg.optimization.execution_accelerators.gpu_execution_accelerator if a.name == "tensorrt"]
        if not accs:
            reject("no gpu_execution_accelerator named \"tensorrt\" under optimization { execution_accelerators }")
        p = dict(accs[0].parameters)
        if p.get("precision_mode") != "FP16":
            reject("precision_mode should make TensorRT use the GPU's fp16 tensor cores")
        if p.get("trt_engine_cache_enable") != "1":
            reject("the engine cache is off: every container start would rebuild the engine")
        if p.get("trt_engine_cache_path") != cache_path:
            reject(f"trt_engine_cache_path {p.get('trt_engine_cache_path')!r} is not the mounted cache volume")
        keys = ("trt_profile_min_shapes", "trt_profile_opt_shapes", "trt_profile_max_shapes")
        missing = [k for k in keys if k not in p]
        if missing:
            reject(f"missing {', '.join(missing)}: without a profile the engine fits one shape only")
        lo, opt, hi = (batch_of(p[k], k) for k in keys)
        if lo != 1:
            reject(f"the profile's min batch is {lo}: single-image requests would not fit")
        if hi != max_batch:
            reject(f"the profile's max batch is {hi}, but the dynamic batcher can form batches up to max_batch_size ({max_batch})")
        if not lo <= opt <= hi:
            reject(f"the opt batch {opt} is outside the profile's [min, max]")
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
    or lowest (`"min"`) `metric`; answers within `rel_tol` of the best are accepted too."""
    if mode not in ("max", "min"):
        raise ValueError("mode must be 'max' or 'min'")
    df = _where(_frame(table), at)
    agg = df.groupby(df[key].map(_norm))[metric].agg(mode)
    best = agg.max() if mode == "max" else agg.min()
    word = "highest" if mode == "max" else "lowest"

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
        if not ok:
            reject(f"{key} {value} has {metric} {got:.4g}{where}; another {key} in this table has a {word} value")
        return f"{key} {value}: {metric} {got:.4g}{where}, the {word} in this run"

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
            return dict(zip(value[units_col], value[col]))
        if isinstance(value, pd.Series):
            return value.to_dict()
        if isinstance(value, Mapping):
            return dict(value)
        if isinstance(value, (list, tuple)):
            if len(value) != len(expected):
                reject(f"give one efficiency per {units_col} value measured ({len(expected)}), got {len(value)}")
            return dict(zip(expected, value))
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

    Correct: readiness asks /readyz (take the pod out of the Service while it cannot serve), liveness asks
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
        return f"readiness /readyz, liveness /healthz, startup allows {allowed:g} s (cold start here {cold_start_s:.1f} s)"

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
                        paths: tuple = ("/readyz", "/healthz"), script: str = "healthcheck.py",
                        missing_tools: tuple = ("curl", "wget"), exercise: str, step=None,
                        strict: bool | None = None) -> CheckResult:
    """answer: YAML of a compose service's `healthcheck:` mapping (with or without the `healthcheck:` key), or
    fn(cold_start_s). Correct: a CMD/CMD-SHELL test that asks the service on `port` for one of `paths` (or runs
    the image's own `script`), using no tool the slim image lacks (`missing_tools`), and a start_period that
    covers `margin` × this run's measured cold start (failures during it do not count)."""

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
            if not any(p in cmd for p in paths):
                reject(f"the test should ask the service's health endpoint ({' or '.join(paths)})")
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
