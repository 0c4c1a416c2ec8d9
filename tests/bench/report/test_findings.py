"""A comparison kept as its fields: the round trip through JSON, the key two runs are matched by, and what counts
as the same conclusion."""

import json

from servelab.bench.report.findings import Finding, Kind, ranges_overlap, same_conclusion
from servelab.bench.report.sentences import leader_finding, ratio_finding, say, versus_finding
from servelab.bench.report.verdicts import Reading, Why


def _ratio(v, lo, hi, **kw):
    return {"ratio": v, "ratio_min": lo, "ratio_max": hi, "repeats": 4, "a": "fastapi", "b": "triton-http",
            "concurrency": 8, **kw}


def _fig(v, lo, hi, stable=True):
    return {"throughput_img_s": v, "throughput_min_img_s": lo, "throughput_max_img_s": hi, "stable": stable}


def test_fields_survive_json_and_render_the_same_sentence():
    found = [ratio_finding(_ratio(1.3, 1.2, 1.4)), ratio_finding(_ratio(1.0, 0.9, 1.1, quick=True)),
             ratio_finding(_ratio(1.3, 1.2, 1.4, params={"device": "emulated flat"})),
             versus_finding("A", _fig(20, 19, 21), "B", _fig(15, 14, 16, stable=False), drift=0.25),
             versus_finding("A", {"latency_p50_ms": 50, "latency_p50_min_ms": 49, "latency_p50_max_ms": 52}, "B",
                            {"latency_p50_ms": 60, "latency_p50_min_ms": 58, "latency_p50_max_ms": 63},
                            metric="latency_p50_ms", unit="ms", digits=0),
             leader_finding({"A": _fig(20, 19, 21), "B": _fig(20.5, 19.5, 21.5), "C": _fig(10, 9, 11)}),
             versus_finding("A", _fig(20, 19, 21), "D", {"throughput_img_s": 5.0})]
    for f in found:
        back = Finding.from_dict(json.loads(json.dumps(f.to_dict())))
        assert back == f and say(back) == say(f) and back.key == f.to_dict()["key"]


def test_the_stored_fields_name_what_was_compared_and_how_it_read():
    d = ratio_finding(_ratio(1.07, 1.02, 1.12, params={"device": "emulated flat"})).to_dict()
    assert d["key"] == "fastapi÷triton-http throughput c=8 on emulated flat"
    assert (d["kind"], d["reading"], d["ahead"], d["why"], d["pairs"], d["margin"]) == (
        "interleaved ratio", "consistent", "fastapi", "below the margin", 4, 0.1)
    assert d["figures"] == {"fastapi÷triton-http": [1.07, 1.02, 1.12]} and d["device"] == "emulated flat"
    tie = versus_finding("A", _fig(20, 19, 21), "B", _fig(20.5, 19.5, 21.5)).to_dict()
    assert (tie["kind"], tie["reading"], tie["ahead"], tie["why"]) == ("apart", "too close", None, str(Why.OVERLAP))
    lead = leader_finding({"A": _fig(20, 19, 21), "B": _fig(20.5, 19.5, 21.5), "C": _fig(10, 9, 11)})
    assert lead.kind is Kind.LEADER and lead.tied == ("B", "A") and lead.verdict.reading is Reading.TOO_CLOSE


def test_same_conclusion_is_the_same_reading_and_the_same_side_ahead():
    a = ratio_finding(_ratio(1.07, 1.02, 1.12))
    assert same_conclusion(a, ratio_finding(_ratio(1.05, 1.01, 1.09)))      # other numbers, same finding
    assert not same_conclusion(a, ratio_finding(_ratio(0.95, 0.91, 0.99)))  # the lead changed sides
    assert not same_conclusion(a, ratio_finding(_ratio(1.3, 1.2, 1.4)))     # now ranked
    assert not same_conclusion(a, ratio_finding(_ratio(1.0, 0.97, 1.04)))   # now too close
    assert ranges_overlap(a, ratio_finding(_ratio(1.3, 1.11, 1.4))) == {"fastapi÷triton-http": True}
    assert ranges_overlap(a, ratio_finding(_ratio(1.3, 1.2, 1.4))) == {"fastapi÷triton-http": False}
    best = {"A": _fig(30, 29, 31), "B": _fig(20, 19, 21)}
    assert same_conclusion(leader_finding(best), leader_finding(dict(best, A=_fig(32, 31, 33))))
    assert not same_conclusion(leader_finding(best), leader_finding(dict(best, A=_fig(21, 20, 22))))
