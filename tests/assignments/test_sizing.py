"""Sizing checks: replicas for a load and the cost of 1,000 images, with hints for the usual slips (units,
rounding)."""

from __future__ import annotations

import math

import pytest

from servelab.assignments import checks
from servelab.assignments.result import FAIL, STRICT_ENV


@pytest.fixture(autouse=True)
def _not_strict(monkeypatch):
    monkeypatch.delenv(STRICT_ENV, raising=False)


def test_cost_per_1k_images():
    kw = dict(throughput_img_s=25.0, price_per_hour=0.9, exercise="t")
    assert checks.cost_per_1k_images(0.01, **kw).passed  # 0.9 / (25*3600) * 1000
    for wrong, why in [(36.0, "per hour"), (0.00001, "one image"), (0.02, "does not follow")]:
        r = checks.cost_per_1k_images(wrong, **kw)
        assert r.status == FAIL and why in r.message, r.message


def test_replicas_for_load():
    kw = dict(per_replica_img_s=25.0, target_img_s=200.0, utilisation=0.7, exercise="t")
    assert checks.replicas_for_load(12, **kw).passed  # 200 / 17.5 = 11.4 -> 12
    for wrong, why in [(8, "do not reach"), (11, "do not reach"), (13, "fewer"), (11.4, "whole number")]:
        r = checks.replicas_for_load(wrong, **kw)
        assert r.status == FAIL and why in r.message, r.message
    assert math.ceil(200 / 17.5) == 12
