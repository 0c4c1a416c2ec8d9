"""A run's headlines kept as text and findings; two runs' headlines compared by the findings' fields."""

import ast
import json
from pathlib import Path

import servelab
from servelab.bench.report.headlines import compare_headlines, findings, load_headlines, record_headline
from servelab.bench.report.sentences import ratio_finding, versus_finding


def _ratio(v, lo, hi, c=8):
    return ratio_finding({"ratio": v, "ratio_min": lo, "ratio_max": hi, "repeats": 4, "a": "grpc", "b": "http",
                          "concurrency": c})


def test_record_headline_replaces_and_keeps_the_others(tmp_path):
    record_headline(tmp_path, "01", "first", [_ratio(1.3, 1.2, 1.4)])
    record_headline(tmp_path, "07", "seventh")
    record_headline(tmp_path, "01", "first again", [_ratio(1.0, 0.9, 1.1)])
    data = load_headlines(tmp_path)
    assert data == json.loads((tmp_path / "headlines.json").read_text())
    assert data["07"] == {"text": "seventh", "verdicts": []}
    (only,) = findings(data["01"]).values()
    assert only == _ratio(1.0, 0.9, 1.1)


def test_one_finding_stated_twice_is_stored_once_and_two_on_one_key_both_kept(tmp_path):
    record_headline(tmp_path, "06b", "t", [_ratio(1.3, 1.2, 1.4), _ratio(1.3, 1.2, 1.4), _ratio(1.0, 0.9, 1.1)])
    keys = [d["key"] for d in load_headlines(tmp_path)["06b"]["verdicts"]]
    assert keys == ["grpc÷http throughput c=8", "grpc÷http throughput c=8 (2)"]


def test_headlines_compare_by_fields_not_words():
    a = {"07": {"text": "anything", "verdicts": [_ratio(1.07, 1.02, 1.12).to_dict(), _ratio(1.3, 1.2, 1.4, 1).to_dict()]}}
    same = {"07": {"text": "other words", "verdicts": [_ratio(1.05, 1.01, 1.09).to_dict(),
                                                       _ratio(1.25, 1.15, 1.3, 1).to_dict()]}}
    (row,) = compare_headlines(a, same)
    assert row["verdict"] == "same" and row["differences"] == []
    # the first ratio now ranked, its pairs overlapping A's: the margin runs through one ratio
    moved = {"07": {"text": "anything", "verdicts": [_ratio(1.2, 1.11, 1.3).to_dict(), _ratio(1.3, 1.2, 1.4, 1).to_dict()]}}
    (row,) = compare_headlines(a, moved)
    (d,) = row["differences"]
    assert row["verdict"] == "differs" and d.startswith("grpc÷http throughput c=8: A consistent, grpc ahead")
    assert "| B ranked, grpc ahead" in d and d.endswith("(the two runs' pairs overlap: one figure, read differently "
                                                         "where the margin runs through it)")
    # a finding in one run only differs too
    (row,) = compare_headlines(a, {"07": {"text": "", "verdicts": a["07"]["verdicts"][:1]}})
    assert row["differences"] == ["grpc÷http throughput c=1: only in A"]
    # apart figures: the side ahead changed, ranges apart
    fig = lambda v: {"throughput_img_s": v, "throughput_min_img_s": v - 1, "throughput_max_img_s": v + 1,  # noqa: E731
                     "stable": True}
    x = {"03": {"text": "", "verdicts": [versus_finding("int8", fig(20), "fp32", fig(15)).to_dict()]}}
    y = {"03": {"text": "", "verdicts": [versus_finding("int8", fig(15), "fp32", fig(20)).to_dict()]}}
    (row,) = compare_headlines(x, y)
    assert row["verdict"] == "differs" and "A ranked, int8 ahead" in row["differences"][0]
    assert row["differences"][0].endswith("(the two runs' ranges do not overlap for int8, fp32)")


def test_a_headline_recorded_as_text_only_is_not_comparable():
    old = {"07": {"text": "grpc ahead by 1.31×", "claim": "grpc ahead by #×"}}
    new = {"07": {"text": "grpc ahead by 1.31×", "verdicts": []}}
    (row,) = compare_headlines(old, new)
    assert row["verdict"] == "not comparable"
    assert row["differences"] == ["no verdict data in A: its headline was recorded as text only"]
    assert [r["verdict"] for r in compare_headlines({}, new)] == ["only in B"]


def test_no_module_reads_headline_text_with_a_regular_expression():
    """Conclusions are compared as fields: the modules that store and compare headlines do not import `re`."""
    root = Path(servelab.__file__).parent
    for rel in ("bench/report/headlines.py", "bench/report/findings.py", "bench/report/sentences.py",
                "bench/results/compare.py", "lab/step.py"):
        tree = ast.parse((root / rel).read_text())
        imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        assert "re" not in imported and "regex" not in imported, rel
