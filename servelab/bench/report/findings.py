"""A comparison a headline states, kept as its fields: what against what, the figures with their ranges, the
reading (ranked, consistent, too close), who is ahead, why not ranked, the margin. Sentences are rendered from a
Finding (servelab.bench.report.sentences); headlines.json stores them; `servelab bench compare` matches two runs'
findings by `key` and compares their fields.

    f = ratio_finding(record)            # or versus_finding(...), leader_finding(...)
    f.key                                # "grpc÷http throughput c=8": what was compared, the same in every run
    Finding.from_dict(f.to_dict()) == f
    same_conclusion(f, g)                # same reading, same side ahead (and, for a leader, the same tie)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum

from servelab.bench.report.verdicts import Reading, Verdict, Why


class Kind(StrEnum):
    """What sort of comparison a finding is."""

    RATIO = "interleaved ratio"  # A ÷ B measured in alternating windows: one figure, its pair range
    APART = "apart"              # two figures measured at different times, each with its window range
    LEADER = "leader"            # the best of several figures measured at different times, read against each other


@dataclass(frozen=True)
class Finding:
    """One comparison and its reading. `figures`: {name: (value, low, high)} — for a ratio one entry, "A÷B";
    `metric`: a record field (throughput_img_s) or, for a ratio, what it divides ("throughput"); `context`: what
    else tells this comparison from another of the same names (e.g. "c=8"); `device`: the emulated device's label
    when an emulation was measured; `higher_is_better`: false for a latency; `others`: a leader's best read against each other figure, in the order given."""

    kind: Kind
    a: str
    b: str
    metric: str
    figures: dict[str, tuple[float, float, float]]
    verdict: Verdict
    context: str = ""
    device: str | None = None
    quick: bool = False
    unit: str = ""
    digits: int = 1
    higher_is_better: bool = True
    others: tuple[tuple[str, Verdict], ...] = field(default=())

    @property
    def key(self) -> str:
        """What was compared, as the same words in every run: two runs' findings are matched by it."""
        if self.kind is Kind.RATIO:
            head = f"{self.a}÷{self.b} {self.metric}"
        elif self.kind is Kind.APART:
            head = f"{self.a} vs {self.b} {self.metric}"
        else:
            head = f"leader of {', '.join(self.figures)} {self.metric}"
        return " ".join(x for x in (head, self.context, f"on {self.device}" if self.device else "") if x)

    @property
    def ahead(self) -> str | None:
        """The name of the side ahead (ranked or a consistent lead), None when too close to call."""
        if self.kind is Kind.LEADER:
            return None if self.tied else self.a
        return self.verdict.side(self.a, self.b)

    @property
    def tied(self) -> tuple[str, ...]:
        """A leader's figures too close to the best to tell apart from it (the best among them); () otherwise."""
        close = [n for n, v in self.others if v.reading is Reading.TOO_CLOSE]
        return (self.a, *close) if close else ()

    def to_dict(self) -> dict:
        """The finding as JSON-ready fields (what headlines.json stores)."""
        return {"key": self.key, "kind": str(self.kind), "a": self.a, "b": self.b, "metric": self.metric,
                "context": self.context, "device": self.device, "quick": self.quick, "unit": self.unit,
                "digits": self.digits, "higher_is_better": self.higher_is_better, "figures": {n: list(v) for n, v in self.figures.items()},
                "ahead": self.ahead, "tied": list(self.tied), **_verdict_fields(self.verdict, self.a, self.b),
                "others": [{"name": n, **_verdict_fields(v, self.a, n)} for n, v in self.others]}

    @classmethod
    def from_dict(cls, d: dict) -> Finding:
        """The finding `to_dict` wrote."""
        return cls(kind=Kind(d["kind"]), a=d["a"], b=d["b"], metric=d["metric"],
                   figures={n: tuple(float(x) for x in v) for n, v in d["figures"].items()},
                   verdict=_verdict(d, d["a"], d["b"]), context=d.get("context", ""), device=d.get("device"),
                   quick=bool(d.get("quick")), unit=d.get("unit", ""), digits=int(d.get("digits", 1)),
                   higher_is_better=bool(d.get("higher_is_better", True)),
                   others=tuple((o["name"], _verdict(o, d["a"], o["name"])) for o in d.get("others", ())))


def _verdict_fields(v: Verdict, a: str, b: str) -> dict:
    lead = None if v.lead is None or not math.isfinite(v.lead) else v.lead
    return {"reading": str(v.reading), "side": v.side(a, b), "lead": lead, "margin": v.margin,
            "why": None if v.why is None else str(v.why), "unsettled": [{"a": a, "b": b}[s] for s in v.unsettled],
            "pairs": v.pairs, "drifted": v.drifted}


def _verdict(d: dict, a: str, b: str) -> Verdict:
    side = {a: "a", b: "b"}
    lead = d.get("lead")
    return Verdict(reading=Reading(d["reading"]), ahead=side.get(d.get("side")),
                   lead=float("inf") if lead is None and d.get("side") else lead, margin=float(d["margin"]),
                   why=None if d.get("why") is None else Why(d["why"]),
                   unsettled=tuple(side[n] for n in d.get("unsettled", ()) if n in side), pairs=d.get("pairs"),
                   drifted=bool(d.get("drifted")))


def same_conclusion(x: Finding, y: Finding) -> bool:
    """Whether two runs' findings of one comparison conclude the same: the same reading and the same side ahead
    (for a leader, also the same names tied at the top and the same reading against each other figure)."""
    if (x.kind, x.verdict.reading, x.ahead, set(x.tied)) != (y.kind, y.verdict.reading, y.ahead, set(y.tied)):
        return False
    if x.kind is Kind.LEADER:
        return {n: v.reading for n, v in x.others} == {n: v.reading for n, v in y.others}
    return True


def ranges_overlap(x: Finding, y: Finding) -> dict[str, bool]:
    """{figure name: whether the two runs' ranges of it overlap}, for the figures both findings carry."""
    return {n: x.figures[n][1] <= y.figures[n][2] and y.figures[n][1] <= x.figures[n][2]
            for n in x.figures if n in y.figures}
