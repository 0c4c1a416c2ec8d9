"""Notebook 06c: the admission handler on screen before the harness measures it, the shedding lesson read from the
run's own records (no direction stated in advance), and the monitoring view (a real Prometheus, PromQL quantiles,
Triton's queue and compute, a shedding alert) drawn from the run, saying so where no Prometheus could be started."""

from __future__ import annotations

import re

import pytest

from servelab.lab import notebooks as nbs

pytestmark = pytest.mark.notebooks


def source(prefix: str = "06c_") -> str:
    return next(p for p in nbs.discover() if p.stem.startswith(prefix)).read_text()


def test_the_admission_handler_is_shown_before_the_overload_harness_runs():
    text = source()
    shown = text.index("show_code(Gate.__call__)")
    assert shown < text.index("overload(step.run"), "the lines that shed load come before the harness"
    assert "show_code(Admission.refusal)" in text, "the gate's two bounds, count and expected wait, are on screen"


def test_the_shedding_lesson_is_read_from_the_run():
    text = source()
    # its heading states no direction either: one run kept more goodput with the gate, another without
    section = text[text.index("### What shedding early costs and buys"):text.index("## Watching it happen")]
    code = "\n".join(c for c in re.split(r"^# %%", section, flags=re.M) if not c.lstrip().startswith("[markdown]"))
    assert "step.versus(" in code and 'metric="latency_p99_ms"' in code, "goodput and accepted p99, compared by the run"
    assert "grade(" in code and "rejections" in code, "why: graded, from where each copy's requests went"
    assert "goodput stays near capacity" not in section and "goodput *falls*" not in section
    assert "keeps a server useful" not in text, "a heading that promises a direction the run may contradict"
    # a copy whose windows never settled once read "kept 50 % of its goodput (flat)": its band reaches 1 whatever
    # the ratio, so it is said to be ungraded, not flat
    assert "not graded: its windows never" in code


def test_the_monitoring_view_runs_on_a_real_prometheus_and_is_plotted():
    text = source()
    section = text[text.index("## Watching it happen: a monitoring view"):]
    assert re.search(r"\bmonitor(ing)?\(", section) and "plot_monitoring(" in section
    assert "histogram_quantile" in section and "nv_inference_queue_duration_us" in section
    assert re.search(r"Predict first", section) and "step.answer(" in section
    # without Prometheus the notebook says so in one line and still shows servelab's own records
    assert "view.prometheus if view.scraped else" in section
    assert 'Target("triton", lab.triton_metrics_url)' in section


def test_the_three_way_comparison_keeps_no_operations_section():
    text = source("06a_")
    assert "overload(" not in text and "monitor(" not in text, "past capacity and monitoring are notebook 06c"
    assert "06c" in text, "06a points the student to where they went"
