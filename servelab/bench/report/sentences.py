"""What a comparison says in words: every sentence, figure and "who leads" rendered from a Finding's fields
(servelab.bench.report.findings), so a headline can store the fields and `compare` never reads the words.

    versus(name_a, a, name_b, b, metric=…, unit=…, drift=…), ratio_sentence(record), ratio_figure(record),
    idle_sentence(record), leader({name: record}, drift=…), said(verdict, name_a, name_b, interleaved=…)
    versus_finding / ratio_finding / leader_finding(…) -> Finding;  say(finding) -> the same sentence
"""

from __future__ import annotations

import math

from servelab.bench.report.findings import Finding, Kind
from servelab.bench.report.verdicts import (
    INDISTINGUISHABLE,
    Reading,
    Verdict,
    Why,
    apart_reading,
    band,
    drifted,
    margin,
    ratio_reading,
)


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %" if abs(x) < 0.01 else f"{100 * x:.0f} %"


def _below_margin(v: Verdict, interleaved: bool) -> str:
    m = _pct(v.margin)
    if interleaved:
        return f"below the {m} margin we rank by"
    if v.drifted:
        return f"within the {m} this machine drifted during this run (drift probe), so the order may be the machine's"
    return f"below the {m} margin we rank figures measured at different times by"


def said(v: Verdict, name_a: str, name_b: str, *, interleaved: bool) -> str:
    """A reading in words — the phrase both the sentences below and the exercise checks print:
    "B ahead by 7 %, all 4 pairs agree, below the 10 % margin we rank by" (consistent), "A ahead by 31 %, every
    pair past the 10 % margin" (ranked), "A and B are indistinguishable here: their ranges overlap"."""
    names = {"a": name_a, "b": name_b}
    x = names.get(v.ahead)
    other = names.get({"a": "b", "b": "a"}.get(v.ahead))
    every = f"all {v.pairs} pairs" if v.pairs else "every pair"
    unsettled = " and ".join(names[s] for s in v.unsettled)
    if v.reading is Reading.RANKED:
        if interleaved:
            return f"{x} ahead by {_pct(v.lead)}, every pair past the {_pct(v.margin)} margin"
        return f"{x} ahead of {other} by {_pct(v.lead)}, every window apart"
    if v.reading is Reading.CONSISTENT:
        if v.why is Why.UNSETTLED:
            if interleaved:
                return (f"{every} put {x} ahead (by {_pct(v.lead)}), but the pair ratios never settled, so this run "
                        "does not rank them")
            return (f"{x} ahead of {other} in every window (by {_pct(v.lead)}), but {unsettled} never settled (its "
                    "windows kept moving), so this run does not rank them")
        if interleaved and v.lead > v.margin:  # the ratio is past the margin, its weakest pairs are not
            return f"{x} ahead by {_pct(v.lead)}, {every} agree, but not all clear the {_pct(v.margin)} margin we rank by"
        if interleaved:
            return f"{x} ahead by {_pct(v.lead)}, {every} agree, {_below_margin(v, True)}"
        return f"{x} ahead of {other} by {_pct(v.lead)} in every window, {_below_margin(v, False)}"
    return f"{name_a} and {name_b} are {INDISTINGUISHABLE}: {_why_not(v, unsettled, interleaved)}"


def _why_not(v: Verdict, unsettled: str, interleaved: bool) -> str:
    """Why a comparison that is too close to call was not read either way, in words."""
    return {Why.BOTH_SIDES: "the pairs fall on both sides of 1, too close to call",
            Why.OVERLAP: "their ranges overlap",
            Why.NO_SPREAD: "one window pair, no spread recorded" if interleaved else "one window, no spread recorded",
            Why.TOO_FEW: f"only {v.pairs} pairs, too few to show a direction",
            Why.UNSETTLED: f"their ranges overlap and {unsettled} never settled (its windows kept moving)"}[v.why]


def _fmt_band(v: float, lo: float, hi: float, unit: str, digits: int) -> str:
    u = f" {unit}" if unit else ""
    if lo == hi:
        return f"{v:.{digits}f}{u}"
    return f"{v:.{digits}f}{u} ({lo:.{digits}f}–{hi:.{digits}f})"


def _quick(*figures) -> bool:
    """Whether any figure comes from a smoke run (its numbers are not results)."""
    return any(not isinstance(x, (tuple, list)) and x.get("quick") is True for x in figures)


def _smoke_tail(quick: bool) -> str:
    return " (smoke run: these numbers are not results)" if quick else ""


def versus_finding(name_a: str, a, name_b: str, b, *, metric: str = "throughput_img_s", unit: str = "img/s",
                   digits: int = 1, drift: float | None = None, context: str = "") -> Finding:
    """Two figures of this run measured at different times, read (`apart_reading`) against the margin for such
    figures, given this run's measured `drift` (None: the floor)."""
    return Finding(Kind.APART, name_a, name_b, metric, {name_a: band(a, metric), name_b: band(b, metric)},
                   apart_reading(a, b, metric, drift=drift), context=context, quick=_quick(a, b), unit=unit,
                   digits=digits)


def versus(name_a: str, a, name_b: str, b, *, metric: str = "throughput_img_s", unit: str = "img/s",
           digits: int = 1, drift: float | None = None) -> str:
    """One sentence comparing two figures of this run measured at different times (`versus_finding`), e.g.
    "fastapi reached 21.0 img/s (19.5–22.1), above litserve's 15.2 img/s (14.8–15.9)" (ranked); "fastapi reached
    6.3 img/s (6.1–6.5), above litserve's 6.0 img/s (5.9–6.1): fastapi ahead of litserve by 5 % in every window,
    below the 10 % margin …" (every window apart, a smaller lead than the margin: never "indistinguishable");
    or "fastapi (…) and litserve (…) are indistinguishable here: their ranges overlap" (or one window, no spread)."""
    return say(versus_finding(name_a, a, name_b, b, metric=metric, unit=unit, digits=digits, drift=drift))


def _say_apart(f: Finding) -> str:
    (name_a, (va, la, ha)), (name_b, (vb, lb, hb)) = f.figures.items()
    fa, fb = _fmt_band(va, la, ha, f.unit, f.digits), _fmt_band(vb, lb, hb, f.unit, f.digits)
    tail, v = _smoke_tail(f.quick), f.verdict
    if v.reading is Reading.TOO_CLOSE:
        unsettled = " and ".join({"a": name_a, "b": name_b}[s] for s in v.unsettled)
        return f"{name_a} ({fa}) and {name_b} ({fb}) are {INDISTINGUISHABLE}: {_why_not(v, unsettled, False)}{tail}"
    text = f"{name_a} reached {fa}, {'above' if va > vb else 'below'} {name_b}'s {fb}"
    if v.ranked:
        return text + tail
    return f"{text}: {said(v, name_a, name_b, interleaved=False)}{tail}"


def ratio_verdict(rec) -> tuple[str | None, str]:
    """Which side of an interleaved A/B ratio record this run ranks ahead — (its name, "") — or (None, the reading
    in words: a consistent lead below the margin with its size, or why it is too close to call). See
    `ratio_reading`; `ratio_reading(rec).side(a, b)` also names the side of a consistent lead."""
    v = ratio_reading(rec)
    if v.ranked:
        return v.side(rec.get("a"), rec.get("b")), ""
    if v.reading is Reading.TOO_CLOSE:
        return None, _why_not(v, "the pairs", True)
    return None, said(v, rec.get("a"), rec.get("b"), interleaved=True)


def _number(x) -> float | None:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(v) else v


def ratio_finding(rec, *, what: str = "throughput", digits: int = 2) -> Finding:
    """An interleaved A/B ratio record (or row) read (`ratio_reading`): its A ÷ B figure with the pair range, at
    its concurrency, on its emulated device when it measured one."""
    from servelab.model.device_profile import is_emulated

    c = _number(rec.get("concurrency"))
    params = rec.get("params") if isinstance(rec.get("params"), dict) else {}
    device = params.get("device") or rec.get("params.device")
    name = f"{rec.get('a')}÷{rec.get('b')}"
    return Finding(Kind.RATIO, str(rec.get("a")), str(rec.get("b")), what, {name: band(rec, "ratio")},
                   ratio_reading(rec), context=f"c={c:g}" if c else "",
                   device=str(device) if isinstance(device, str) and is_emulated(device) else None,
                   quick=_quick(rec), unit="×", digits=digits)


def _ratio_number(f: Finding) -> str:
    ((_, (v, lo, hi)),) = f.figures.items()
    d = f.digits
    return f"{f.a} ÷ {f.b} {f.metric}: {v:.{d}f}×" + (f" (pairs {lo:.{d}f}–{hi:.{d}f})" if lo != hi else "")


def ratio_figure(rec, *, what: str = "throughput", digits: int = 2) -> str:
    """An interleaved A/B ratio record's (or row's) figure without its reading: "grpc ÷ http throughput: 1.12×
    (pairs 1.05–1.18)", for a sentence that quotes a comparison another sentence ranks."""
    f = ratio_finding(rec, what=what, digits=digits)
    return _ratio_number(f) + _smoke_tail(f.quick)


def ratio_sentence(rec, *, what: str = "throughput", digits: int = 2) -> str:
    """One sentence for an interleaved A/B ratio record (or row): its figure and its reading (`said`): ranked, a
    consistent lead below the margin with its size, or "indistinguishable here" and why."""
    return say(ratio_finding(rec, what=what, digits=digits))


def _say_ratio(f: Finding) -> str:
    return _ratio_number(f) + "; " + said(f.verdict, f.a, f.b, interleaved=True) + _smoke_tail(f.quick)


def idle_sentence(rec) -> str:
    """What each side of an interleaved A/B ratio record used while idle and whether it was stopped during the
    other's windows: "While idle, fastapi used 0.2 % of one core and litserve used 11 % of one core; each was
    stopped during the other's windows, so neither took CPU from the other"."""
    sides = [(rec.get(k), rec.get(f"idle_cpu_pct_{k}"), rec.get(f"idle_paused_{k}"), rec.get(f"idle_side_{k}"))
             for k in ("a", "b")]
    text = "While idle, " + " and ".join(f"{name} used {pct:g} % of one core" if pct is not None else
                                         f"what {name} used could not be read here" for name, pct, *_ in sides)
    paused = [name for name, _, was, _ in sides if was]
    if len(paused) == 2:
        return text + "; each was stopped during the other's windows, so neither took CPU from the other"
    if paused:
        other, how = next((name, how) for name, _, was, how in sides if not was)
        return text + f"; {paused[0]} was stopped during {other}'s windows, {other} was not: {_reason(how)}"
    return text + "; neither was stopped during the other's windows: " + "; ".join(
        f"{name}, {_reason(how)}" for name, _, _, how in sides)


def _reason(how) -> str:
    """'not paused: <why>' or 'not paused (<why>)' as '<why>'."""
    how = str(how or "")
    for prefix, suffix in (("not paused: ", ""), ("not paused (", ")")):
        if how.startswith(prefix) and how.endswith(suffix):
            return how[len(prefix):len(how) - len(suffix)]
    return how or "not recorded"


def leader_finding(named: dict, *, metric: str = "throughput_img_s", unit: str = "img/s",
                   higher_is_better: bool = True, digits: int = 1, drift: float | None = None) -> Finding | None:
    """Who led among several figures ({name: record or row}, measured at different times): the best read against
    each other figure with `apart_reading` (given this run's measured `drift`). None when nothing was measured."""
    given = [(n, x) for n, x in named.items() if x is not None]
    if not given:
        return None
    best_name, best = max(given, key=lambda kv: band(kv[1], metric)[0] * (1 if higher_is_better else -1))
    others = tuple((n, apart_reading(best, x, metric, higher_is_better=higher_is_better, drift=drift))
                   for n, x in given if n != best_name)
    readings = {v.reading for _, v in others}
    tied = [v for _, v in others if v.reading is Reading.TOO_CLOSE]
    reading = (Reading.TOO_CLOSE if tied else Reading.CONSISTENT if Reading.CONSISTENT in readings
               else Reading.RANKED)
    why = (None if not tied else Why.UNSETTLED if any(v.unsettled for v in tied)
           else Why.NO_SPREAD if any(v.why is Why.NO_SPREAD for v in tied) else Why.OVERLAP)
    verdict = Verdict(reading, ahead=None if tied else "a", margin=margin(drift=drift), why=why,
                      drifted=drifted(drift))
    return Finding(Kind.LEADER, best_name, "", metric, {n: band(x, metric) for n, x in given}, verdict,
                   quick=_quick(*(x for _, x in given)), unit=unit, digits=digits, others=others,
                   higher_is_better=higher_is_better)


def leader(named: dict, *, metric: str = "throughput_img_s", unit: str = "img/s", higher_is_better: bool = True,
           digits: int = 1, drift: float | None = None) -> str:
    """Who led among several figures ({name: record or row}), read pair by pair against the best with
    `apart_reading`: the best is "clear of" the ones it ranks above; a lead in every window below the margin is
    said with its size; the ones whose ranges overlap the best's are named with it as indistinguishable at the
    top. Names are listed in the order given, never in an order a tie decided."""
    f = leader_finding(named, metric=metric, unit=unit, higher_is_better=higher_is_better, digits=digits, drift=drift)
    return "nothing measured" if f is None else say(f)


def _say_leader(f: Finding) -> str:
    best_name, read = f.a, dict(f.others)
    tied = [n for n, v in f.others if v.reading is Reading.TOO_CLOSE]
    small = [n for n, v in f.others if v.reading is Reading.CONSISTENT]
    clear = [n for n, v in f.others if v.ranked]
    tail = _smoke_tail(f.quick)
    word = "highest" if f.higher_is_better else "lowest"
    smalls = "; ".join(said(read[n], best_name, n, interleaved=False) for n in small)
    if not tied:
        head = f"{best_name} ({_fmt_band(*f.figures[best_name], f.unit, f.digits)}) was {word}"
        if not small:
            return f"{head}, clear of {', '.join(clear) or 'nothing else'}{tail}"
        return head + (f", clear of {', '.join(clear)}" if clear else "") + f"; {smalls}{tail}"
    top = [n for n in f.figures if n == best_name or n in tied]
    unsettled = [n for n in tied if read[n].unsettled] + ([best_name] if any("a" in read[n].unsettled for n in tied)
                                                         else [])
    why = (f"{' and '.join(n for n in top if n in unsettled)} never settled (its windows kept moving)" if unsettled
           else "one window, no spread recorded" if any(read[n].why is Why.NO_SPREAD for n in tied)
           else "their ranges overlap")
    names = [f"{n} ({_fmt_band(*f.figures[n], f.unit, f.digits)})" for n in top]
    text = f"{', '.join(names[:-1])} and {names[-1]} are {INDISTINGUISHABLE} at the top: {why}"
    return text + (f"; {smalls}" if small else "") + tail


def say(f: Finding) -> str:
    """The sentence a finding's fields make: what `versus`, `ratio_sentence` and `leader` return."""
    return {Kind.APART: _say_apart, Kind.RATIO: _say_ratio, Kind.LEADER: _say_leader}[f.kind](f)
