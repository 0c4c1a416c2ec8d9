"""The notebook display helpers: comparisons that never rank overlapping figures, and code shown from source."""

from __future__ import annotations

import pytest

from servelab.lab import nb


def point(thr, windows):
    return {"throughput_img_s": thr, "window_throughput_img_s": windows}


def test_overlapping_windows_are_indistinguishable():
    text = nb.compare(point(10.0, [9.0, 11.0]), point(12.0, [10.5, 13.0]), "a", "b")
    assert "indistinguishable here" in text and "ahead" not in text


def test_separate_windows_are_ranked_with_the_ratio():
    text = nb.compare(point(10.0, [9.0, 10.0]), point(12.0, [11.0, 13.0]), "a", "b")
    assert "b ahead by 1.20×" in text


def test_a_single_window_is_not_ranked():
    text = nb.compare(point(10.0, [10.0]), point(20.0, [19.0, 21.0]), "a", "b")
    assert "no ranking" in text and "ahead" not in text


def test_show_code_cuts_between_markers(monkeypatch):
    shown = []
    monkeypatch.setattr(nb, "_display_md", shown.append)
    nb.show_code(nb.repo_path("servelab", "service", "batcher.py"), "async def _loop", "def _queued_images")
    body = shown[0]
    assert "async def _loop" in body and "run_in_executor" in body and "def _queued_images" not in body
    with pytest.raises(ValueError, match="no line contains"):
        nb.show_code(nb.repo_path("servelab", "service", "batcher.py"), "no such line anywhere")
