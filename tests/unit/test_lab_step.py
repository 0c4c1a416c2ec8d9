"""The notebook display helpers: code shown from source, not pasted."""

from __future__ import annotations

import pytest

from servelab.lab import step


def test_show_code_cuts_between_markers(monkeypatch):
    shown = []
    monkeypatch.setattr(step, "_display_md", shown.append)
    step.show_code(step.repo_path("servelab", "service", "batcher.py"), "async def _loop", "def _queued_images")
    body = shown[0]
    assert "async def _loop" in body and "run_in_executor" in body and "def _queued_images" not in body
    with pytest.raises(ValueError, match="no line contains"):
        step.show_code(step.repo_path("servelab", "service", "batcher.py"), "no such line anywhere")
