"""Answers read off a table this run measured: the best row, a ratio, a difference, a share, a scaling
efficiency, a threshold. The expected answer is computed here from the same table the notebook shows, so a
check passes for whatever this run measured; where the run does not rank two rows apart (bands that overlap, a
lead below the run's margin, a point that never settled), either is accepted (servelab.assignments.checks.predictions
reads the bands).

    best_choice(answer, records, key="server", metric="throughput_img_s", at={"concurrency": 16}, exercise="06a.1")
    speedup(1.25, table, key="protocol", fast="grpc", slow="http", at={"batch": 8}, exercise="…")
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

import pandas as pd

from servelab.assignments.checks.answer_tables import at_words, close, col, frame, norm, number, where
from servelab.assignments.checks.predictions import measured_bands, reading
from servelab.assignments.result import CheckResult, reject, run_check
from servelab.bench.report import ratio_reading, said
from servelab.errors import InvalidValue


def queue_delay_for_budget(answer, grid, budget_ms: float, *, concurrency: int | None = None,
                           delay_col: str | None = None, latency_col: str = "latency_p99_ms",
                           throughput_col: str = "throughput_img_s", rel_tol: float = 0.02,
                           exercise: str, step=None, strict: bool | None = None) -> CheckResult:
    """answer: max_queue_delay_microseconds (int), or fn(grid, budget_ms) -> int; None if no delay fits.

    Correct: a delay of the grid whose latency is within `budget_ms` — at `concurrency`, or at every
    concurrency measured when None — and whose throughput (at `concurrency`, or at the highest concurrency
    measured, where batching matters) the run does not rank below the best among those (`reading`, with the
    step's margin), or is within `rel_tol` of it. Repeated rows are averaged."""
    df = frame(grid)
    dcol = delay_col or col(df, "queue_delay_us", "max_queue_delay_us", "max_delay_us", "delay_us")
    ccol = col(df, "concurrency")
    if concurrency is not None:
        df = where(df, {ccol: concurrency})
    cell = df.groupby([dcol, ccol])[[latency_col, throughput_col]].mean().reset_index()
    top = cell[ccol].max()
    per = cell.groupby(dcol).agg(lat=(latency_col, "max"))
    per["thr"] = cell[cell[ccol] == top].set_index(dcol)[throughput_col].reindex(per.index)
    within = per[per["lat"] <= budget_ms]
    at = f"at concurrency {concurrency}" if concurrency is not None else "at every concurrency measured"
    bands = measured_bands(df[df[ccol] == top], key=dcol, metric=throughput_col,
                           margin=step.margin() if hasattr(step, "margin") else None)
    pct = f"{100 * float(bands['margin'].iloc[0]):.0f} %" if len(bands) else ""

    def judge(value):
        if value is None:
            if within.empty:
                return f"no delay in this run's grid keeps {latency_col} within {budget_ms:g} ms {at}"
            reject(f"at least one measured delay keeps {latency_col} within {budget_ms:g} ms {at}; look again")
        d = number(value, "max_queue_delay_microseconds")
        if d not in per.index:
            reject(f"{d:g} µs is not a delay this run measured: choose one of the grid's `{dcol}` values")
        if within.empty:
            reject(f"no delay meets {budget_ms:g} ms {at} in this run: the right answer is None")
        row = per.loc[d]
        if row["lat"] > budget_ms:
            reject(f"with {d:g} µs the {latency_col} {at} was {row['lat']:.1f} ms, over the {budget_ms:g} ms budget")
        best = within["thr"].max()
        leader = within["thr"].idxmax()
        read = reading(bands, leader, d) if d in bands.index and leader in bands.index else None
        ranked_below = read is not None and read.ranked and read.ahead == "a"
        if row["thr"] < best * (1 - rel_tol) and (read is None or ranked_below):
            reject(f"{d:g} µs meets the budget, but another delay that also meets it gave more {throughput_col}, "
                   f"beyond the measured spread and this run's {pct} margin: compare throughput among the rows "
                   "within budget")
        # the best, and any other delay within budget this run does not rank below it: the best is then a tie
        level = [o for o in within.index if o != d and o in bands.index and d in bands.index
                 and not (reading(bands, d, o).ranked and reading(bands, d, o).ahead == "a")]
        best_words = (("the best throughput within budget" + (
                          f", tied with {', '.join(f'{o:g} µs' for o in level)}, which this run does not rank below it"
                          if level else "")) if d == leader else
                      f"which this run does not rank below the best within budget ({leader:g} µs: "
                      + said(read, f"{leader:g} µs", f"{d:g} µs", interleaved=False) + ")" if read is not None else
                      f"within {rel_tol:.0%} of the best within budget")
        return (f"{d:g} µs keeps {latency_col} ≤ {row['lat']:.1f} ms (budget {budget_ms:g} ms) {at} "
                f"with {row['thr']:.1f} img/s at concurrency {top:g}, {best_words}")

    return run_check("queue_delay_for_budget", exercise, answer, (grid, budget_ms), judge, step, strict)


def smallest_payload(answer, table, *, batch: int | None = None, among: Iterable[str] | None = None,
                     bytes_col: str | None = None, exercise: str, step=None, strict: bool | None = None) -> CheckResult:
    """answer: the payload name (as in the table's `payload` column), or fn(table) -> name.

    Correct: the payload with the fewest bytes per request (at `batch` when given; else summed over the
    table's batches), among `among` when given."""
    df = frame(table)
    bcol = bytes_col or col(df, "bytes_per_request", "bytes_per_image", "payload_bytes", "bytes")
    pcol = col(df, "payload")
    if batch is not None:
        df = where(df, {col(df, "batch"): batch})
    if among is not None:
        df = df[df[pcol].map(norm).isin({norm(a) for a in among})]
    size = df.groupby(df[pcol].map(norm))[bcol].sum()

    def judge(value):
        if not isinstance(value, str):
            reject(f"answer with the payload's name from the table's `{pcol}` column, got {value!r}")
        v = norm(value)
        if v not in size.index:
            reject(f"{value!r} is not one of the payloads compared here: use a name from the `{pcol}` column")
        if size[v] > size.min():
            ratio = size[v] / size.min()
            reject(f"{value} is {ratio:.1f}× the size of the smallest payload in this table: compare the `{bcol}` column")
        return f"{value}: {size[v]:,.0f} bytes" + (f" at batch {batch}" if batch is not None else "") + ", the smallest"

    return run_check("smallest_payload", exercise, answer, (table,), judge, step, strict)


def best_choice(answer, table, *, key: str, metric: str, mode: str = "max", at: Mapping | None = None,
                rel_tol: float = 0.0, exercise: str, step=None, strict: bool | None = None,
                pairs: Iterable[Mapping] = ()) -> CheckResult:
    """answer: a value of column `key` (a backend, a batch size, a protocol …), or fn(table) -> value.

    Correct: the `key` whose row (restricted to `at`, e.g. {"concurrency": 16}) has the highest (`mode="max"`)
    or lowest (`"min"`) `metric`; answers within `rel_tol` of the best are accepted too, and so is any the run's
    reading (`reading`, with the step's margin) does not rank below another: bands that overlap, a lead below
    the run's margin, or a side that never settled (the message gives the reading). `pairs`: interleaved A/B
    records (kind "ab": `a` and `b` values of `key`, the ratio of `metric` A ÷ B, higher better, with its pair
    range): for the two keys one covers, its reading replaces that of their bands measured apart, as the run's
    own sentences read them (the table's best, ranked behind in those windows, still passes, told so)."""
    if mode not in ("max", "min"):
        raise InvalidValue("mode must be 'max' or 'min'")
    df = where(frame(table), at)
    agg = df.groupby(df[key].map(norm))[metric].agg(mode)
    best = agg.max() if mode == "max" else agg.min()
    word, better = ("highest", "higher") if mode == "max" else ("lowest", "lower")
    band = measured_bands(df, key=key, metric=metric, margin=step.margin() if hasattr(step, "margin") else None)
    band.index = band.index.map(norm)
    top_key = agg.idxmax() if mode == "max" else agg.idxmin()
    pct = f"{100 * float(band['margin'].iloc[0]):.0f} %" if len(band) else ""
    together = {frozenset((norm(r["a"]), norm(r["b"]))): r for r in pairs if r.get("kind", "ab") == "ab"}

    def compare(x, y):
        """(the reading of x against y, whether it comes from interleaved windows)."""
        rec = together.get(frozenset((x, y)))
        if rec is None:
            return reading(band, x, y, higher_is_better=mode == "max"), False
        verdict = ratio_reading(rec)
        if norm(rec["a"]) != x:  # the record reads y ÷ x: the side ahead swaps
            verdict = dataclasses.replace(verdict, ahead={"a": "b", "b": "a"}.get(verdict.ahead),
                                          unsettled=tuple({"a": "b", "b": "a"}[s] for s in verdict.unsettled))
        return verdict, True

    def judge(value):
        v = norm(value)
        if v not in agg.index:
            try:  # numeric keys: 16 and "16" and 16.0 name the same batch size
                v = next(k for k in agg.index if float(k) == float(value))
            except (StopIteration, TypeError, ValueError):
                reject(f"{value!r} is not a {key} measured here: use a value from the table's `{key}` column")
        got = agg[v]
        ok = got >= best * (1 - rel_tol) if mode == "max" else got <= best * (1 + rel_tol)
        where = at_words(at)
        read = {k: compare(k, v) for k in band.index if k != v and v in band.index}
        beaten = {k: r for k, r in read.items() if r[0].ranked and r[0].ahead == "a"}
        inter = {k: r for k, r in beaten.items() if r[1]}
        if v == top_key and inter:  # the table's best, ranked behind in alternating windows: its points are of
            k, (verdict, _) = next(iter(inter.items()))  # other moments; accepted, with the verdict that holds
            return (f"{key} {value}: {metric} {got:.4g}{where}, the {word} in the table, but in alternating windows "
                    f"{said(verdict, str(k), str(v), interleaved=True)}: the windows hold, so {key} {k} is the "
                    "better answer")
        if beaten and not (ok and rel_tol):
            if inter:  # ranked in alternating windows: the run's own verdict names the key ahead
                k, (verdict, _) = next(iter(inter.items()))
                reject(f"{key} {value} has {metric} {got:.4g}{where}, but in alternating windows "
                       f"{said(verdict, str(k), str(v), interleaved=True)}")
            reject(f"{key} {value} has {metric} {got:.4g}{where}; another {key} in this table has a {better} value, "
                   f"beyond the measured spread and this run's {pct} margin")
        tied = {k: r for k, r in read.items() if not r[0].ranked}
        if tied:
            readings = "; ".join(said(verdict, str(k), str(v), interleaved=inter)
                                 for k, (verdict, inter) in sorted(tied.items(), key=lambda kv: str(kv[0])))
            return (f"{key} {value}: {metric} {got:.4g}{where}, tied with {len(tied)} other(s) this run does not "
                    f"rank apart from it ({readings})")
        if v != top_key and not ok:
            return f"{key} {value}: {metric} {got:.4g}{where}, ranked ahead of every other {key} in alternating windows"
        return f"{key} {value}: {metric} {got:.4g}{where}, the {word} in this run"

    return run_check("best_choice", exercise, answer, (table,), judge, step, strict)


def speedup(answer, table, *, key: str, fast, slow, metric: str = "throughput_img_s", at: Mapping | None = None,
            higher_is_better: bool = True, rel_tol: float = 0.02, exercise: str, step=None,
            strict: bool | None = None) -> CheckResult:
    """answer: how many times better `fast` is than `slow` on `metric` (a ratio, e.g. 1.3), or fn(table).

    For throughput (higher is better) that is fast/slow; for a latency (`higher_is_better=False`) slow/fast.
    `at` selects the rows compared (e.g. {"batch": 8, "concurrency": 1}); several matching rows are averaged."""
    df = where(frame(table), at)
    by = df.groupby(df[key].map(norm))[metric].mean()
    for k in (fast, slow):
        if norm(k) not in by.index:
            raise InvalidValue(f"no {key}={k} rows in the table (has {', '.join(by.index)})")
    f, s = by[norm(fast)], by[norm(slow)]
    expected = f / s if higher_is_better else s / f

    def judge(value):
        x = number(value, "the speed-up")
        if close(x, expected, rel_tol):
            return f"{fast} vs {slow}: {x:.3g}× on {metric}" + at_words(at)
        if expected and close(x, 1 / expected, rel_tol):
            reject("that is the ratio the wrong way round: how many times better is the first than the second?")
        if close(x, expected * 100, rel_tol) or close(x, (expected - 1) * 100, rel_tol):
            reject("give a ratio (e.g. 1.25 = 25 % better), not a percentage")
        reject(f"{x:.3g} does not match this run's table: divide the two {metric} values at the rows asked for")

    return run_check("speedup", exercise, answer, (table,), judge, step, strict)


def difference(answer, table, *, key: str, a, b, metric: str = "latency_p50_ms", at: Mapping | None = None,
               unit: str = "ms", rel_tol: float = 0.02, abs_tol: float = 0.05, exercise: str, step=None,
               strict: bool | None = None) -> CheckResult:
    """answer: `metric` of `a` minus `metric` of `b` (e.g. what the network hop adds to p50: service minus
    in-process), or fn(table). `at` selects the rows compared; several matching rows are averaged."""
    df = where(frame(table), at)
    by = df.groupby(df[key].map(norm))[metric].mean()
    for k in (a, b):
        if norm(k) not in by.index:
            raise InvalidValue(f"no {key}={k} rows in the table (has {', '.join(by.index)})")
    expected = float(by[norm(a)] - by[norm(b)])

    def judge(value):
        x = number(value, "the difference")
        if close(x, expected, rel_tol, abs_tol):
            return f"{a} − {b}: {x:+.3g} {unit} on {metric}" + at_words(at)
        if close(x, -expected, rel_tol, abs_tol):
            reject(f"the sign is reversed: subtract {b}'s {metric} from {a}'s")
        if by[norm(b)] and close(x, by[norm(a)] / by[norm(b)], rel_tol):
            reject("that is a ratio; the question asks for a difference in " + unit)
        reject(f"{x:.3g} does not match this run's table: subtract the two {metric} values at the rows asked for")

    return run_check("difference", exercise, answer, (table,), judge, step, strict)


def share(answer, table, *, part: str, whole: str, at: Mapping | None = None, rel_tol: float = 0.02,
          abs_tol: float = 0.005, exercise: str, step=None, strict: bool | None = None) -> CheckResult:
    """answer: the fraction column `part` is of column `whole` (0…1, e.g. the share of the client's latency
    spent outside the server), or fn(table). `at` selects the rows; several matching rows are averaged."""
    df = where(frame(table), at)
    p, w = float(df[part].mean()), float(df[whole].mean())
    if not w:
        raise InvalidValue(f"{whole} is 0 in the rows selected: the share is undefined")
    expected = p / w

    def judge(value):
        x = number(value, "the share")
        if close(x, expected, rel_tol, abs_tol):
            return f"{part} is {x:.1%} of {whole}" + at_words(at)
        if close(x, expected * 100, rel_tol, abs_tol * 100):
            reject("give a fraction between 0 and 1, not a percentage")
        if close(x, 1 - expected, rel_tol, abs_tol):
            reject(f"that is the rest: the share of {whole} that is *not* {part}")
        if p and close(x, w / p, rel_tol):
            reject(f"upside down: divide {part} by {whole}")
        reject(f"{x:.3g} does not match this run's table: divide {part} by {whole} at the rows asked for")

    return run_check("share", exercise, answer, (table,), judge, step, strict)


def scaling_efficiency(answer, table, *, units_col: str = "instances", throughput_col: str = "throughput_img_s",
                       abs_tol: float = 0.01, exercise: str, step=None, strict: bool | None = None) -> CheckResult:
    """answer: efficiency per unit count — {n: efficiency}, a Series indexed by n, or a list in increasing n —
    or fn(table). Efficiency(n) = throughput(n) / ((n / n0) · throughput(n0)), n0 the smallest count measured
    (1.0 = perfect linear scaling); with several rows per n the best throughput counts."""
    df = frame(table)
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
        got = {float(k): number(v, f"efficiency at {k}") for k, v in as_map(value).items()}
        missing = [n for n in expected if float(n) not in got]
        if missing:
            reject(f"no efficiency for {units_col} {missing}")
        if all(close(got[float(n)], e * 100, 0.01) for n, e in expected.items()):
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


def threshold_for_precision(answer, evaluation, *, target_precision: float, threshold_col: str = "threshold",
                            precision_col: str = "precision", recall_col: str = "recall", exercise: str,
                            step=None, strict: bool | None = None) -> CheckResult:
    """answer: a cosine threshold from the evaluation table, or fn(evaluation, target_precision); None if none fits.

    Correct: among thresholds whose precision ≥ target_precision, one with the highest recall (it finds the
    most true duplicates while staying precise enough). servelab.dedup.evaluate's metrics rows work as they
    are: without a `threshold` column, the embedding rows' `setting` ("cosine >= 0.90") gives it."""
    df = frame(evaluation)
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
        t = number(value, "the threshold")
        hit = [x for x in ev.index if close(float(x), t, 0, 1e-9)]
        if not hit:
            reject(f"{t:g} is not a threshold of this evaluation table: choose one of its rows")
        row = ev.loc[hit[0]]
        if row["p"] < target_precision:
            reject(f"at {t:g} precision is {row['p']:.3f}, below the {target_precision:g} target: too many false groupings")
        if row["r"] < ok["r"].max() - 1e-12:
            reject(f"{t:g} is precise enough but another threshold also is and finds more duplicates (higher recall)")
        return f"threshold {t:g}: precision {row['p']:.3f} ≥ {target_precision:g} with recall {row['r']:.3f}, the most recall on target"

    return run_check("threshold_for_precision", exercise, answer, (evaluation, target_precision), judge, step, strict)

