"""Notebook 06a's past-capacity section: the admission handler on screen before the harness measures it, and the
monitoring view (a real Prometheus, PromQL quantiles, Triton's queue and compute, a shedding alert) drawn from
the run, saying so where no Prometheus could be started."""

from __future__ import annotations

import re

import pytest

from servelab.lab import notebooks as nbs

pytestmark = pytest.mark.notebooks


def source() -> str:
    return next(p for p in nbs.discover() if p.stem.startswith("06a_")).read_text()


def test_the_admission_handler_is_shown_before_the_overload_harness_runs():
    text = source()
    shown = text.index("show_code(admitted)")
    assert shown < text.index("overload(step.run"), "the lines that shed load come before the harness"
    assert "show_code(Admission.try_enter)" in text


def test_the_monitoring_view_runs_on_a_real_prometheus_and_is_plotted():
    text = source()
    section = text[text.index("## Watching it happen: a monitoring view"):]
    assert "monitor(" in section and "plot_monitoring(" in section
    assert "histogram_quantile" in section and "nv_inference_queue_duration_us" in section
    assert re.search(r"Predict first", section) and "step.answer(" in section
    # without Prometheus the notebook says so in one line and still shows servelab's own records
    assert "view.prometheus if view.scraped else" in section
    assert 'Target("triton", triton_metrics_url)' in section
