"""What a comparison says in words: every sentence, figure and "who leads" rendered from a Verdict's fields.

    versus(name_a, a, name_b, b, metric=…, unit=…), ratio_sentence(record), ratio_figure(record),
    idle_sentence(record), leader({name: record}), said(verdict, name_a, name_b, interleaved=…)
"""

from __future__ import annotations

from servelab.bench.report.verdicts import (
    INDISTINGUISHABLE,
    Reading,
    Verdict,
    Why,
    apart_reading,
    band,
    machine_drift,
    ratio_reading,
)


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %" if abs(x) < 0.01 else f"{100 * x:.0f} %"


def _below_margin(v: Verdict, interleaved: bool) -> str:
    m = _pct(v.margin)
    if interleaved:
        return f"below the {m} margin we rank by"
    if machine_drift() is not None and machine_drift() >= v.margin:
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


def _smoke(*named) -> str:
    if any(not isinstance(x, (tuple, list)) and x.get("quick") is True for _, x in named):
        return " (smoke run: these numbers are not results)"
    return ""


def versus(name_a: str, a, name_b: str, b, *, metric: str = "throughput_img_s", unit: str = "img/s",
           digits: int = 1) -> str:
    """One sentence comparing two figures of this run measured at different times (`apart_reading`), e.g.
    "fastapi reached 21.0 img/s (19.5–22.1), above litserve's 15.2 img/s (14.8–15.9)" (ranked); "fastapi reached
    6.3 img/s (6.1–6.5), above litserve's 6.0 img/s (5.9–6.1): fastapi ahead of litserve by 5 % in every window,
    below the 10 % margin …" (every window apart, a smaller lead than the margin: never "indistinguishable");
    or "fastapi (…) and litserve (…) are indistinguishable here: their ranges overlap" (or one window, no spread)."""
    va, la, ha = band(a, metric)
    vb, lb, hb = band(b, metric)
    fa, fb = _fmt_band(va, la, ha, unit, digits), _fmt_band(vb, lb, hb, unit, digits)
    tail = _smoke((name_a, a), (name_b, b))
    v = apart_reading(a, b, metric)
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


def _ratio_number(rec, what: str, digits: int) -> str:
    v, lo, hi = band(rec, "ratio")
    return f"{rec.get('a')} ÷ {rec.get('b')} {what}: {v:.{digits}f}×" + (
        f" (pairs {lo:.{digits}f}–{hi:.{digits}f})" if lo != hi else "")


def ratio_figure(rec, *, what: str = "throughput", digits: int = 2) -> str:
    """An interleaved A/B ratio record's (or row's) figure without its reading: "grpc ÷ http throughput: 1.12×
    (pairs 1.05–1.18)", for a sentence that quotes a comparison another sentence ranks."""
    return _ratio_number(rec, what, digits) + _smoke(("", rec))


def ratio_sentence(rec, *, what: str = "throughput", digits: int = 2) -> str:
    """One sentence for an interleaved A/B ratio record (or row): its figure and its reading (`said`): ranked, a
    consistent lead below the margin with its size, or "indistinguishable here" and why."""
    return (_ratio_number(rec, what, digits) + "; " + said(ratio_reading(rec), rec.get("a"), rec.get("b"),
                                                          interleaved=True)
            + _smoke(("", rec)))


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


def leader(named: dict, *, metric: str = "throughput_img_s", unit: str = "img/s", higher_is_better: bool = True,
           digits: int = 1) -> str:
    """Who led among several figures ({name: record or row}), read pair by pair against the best with
    `apart_reading`: the best is "clear of" the ones it ranks above; a lead in every window below the margin is
    said with its size; the ones whose ranges overlap the best's are named with it as indistinguishable at the
    top. Names are listed in the order given, never in an order a tie decided."""
    given = [(n, x) for n, x in named.items() if x is not None]
    if not given:
        return "nothing measured"
    best_name, best = max(given, key=lambda kv: band(kv[1], metric)[0] * (1 if higher_is_better else -1))
    read = {n: apart_reading(best, x, metric, higher_is_better=higher_is_better) for n, x in given if n != best_name}
    tied = [n for n, v in read.items() if v.reading is Reading.TOO_CLOSE]
    small = [n for n, v in read.items() if v.reading is Reading.CONSISTENT]
    clear = [n for n, v in read.items() if v.ranked]
    tail = _smoke(*given)
    word = "highest" if higher_is_better else "lowest"
    smalls = "; ".join(said(read[n], best_name, n, interleaved=False) for n in small)
    if not tied:
        v, lo, hi = band(best, metric)
        head = f"{best_name} ({_fmt_band(v, lo, hi, unit, digits)}) was {word}"
        if not small:
            return f"{head}, clear of {', '.join(clear) or 'nothing else'}{tail}"
        return head + (f", clear of {', '.join(clear)}" if clear else "") + f"; {smalls}{tail}"
    top = [(n, x) for n, x in given if n == best_name or n in tied]
    unsettled = [n for n in tied if read[n].unsettled] + ([best_name] if any("a" in read[n].unsettled for n in tied)
                                                         else [])
    why = (f"{' and '.join(n for n, _ in top if n in unsettled)} never settled (its windows kept moving)" if unsettled
           else "one window, no spread recorded" if any(read[n].why is Why.NO_SPREAD for n in tied)
           else "their ranges overlap")
    names = [f"{n} ({_fmt_band(*band(x, metric), unit, digits)})" for n, x in top]
    text = f"{', '.join(names[:-1])} and {names[-1]} are {INDISTINGUISHABLE} at the top: {why}"
    return text + (f"; {smalls}" if small else "") + tail
