"""Deduplication refuses the emulated accelerator: its vectors are stand-ins, and grouping them finds nonsense."""

from __future__ import annotations

import pytest

from servelab.client import InferenceClient
from servelab.data import encode, synthetic_photo
from servelab.dedup import Catalog, embed, scan
from servelab.dedup.embed import EmulatedEngineRefused


def test_embedding_with_the_emulated_engine_is_refused_before_anything_is_sent(tmp_path, monkeypatch):
    monkeypatch.setenv("SERVELAB_DEVICE_DIR", str(tmp_path / "devices"))
    monkeypatch.setenv("SERVELAB_DEVICE_PROFILE", "flat")
    root = tmp_path / "photos"
    root.mkdir()
    for i in range(3):
        (root / f"p{i}.jpg").write_bytes(encode(synthetic_photo(400 + i, (160, 120))))
    scan(root, tmp_path / "catalog.sqlite")
    with InferenceClient(mode="local", engine="emulated") as client:
        with pytest.raises(EmulatedEngineRefused, match="emulated flat.*not image embeddings.*torch, onnx"):
            embed(tmp_path / "catalog.sqlite", client, progress=False)
    with Catalog(tmp_path / "catalog.sqlite") as cat:
        assert len(cat.embeddings()[0]) == 0 and cat.get_meta("embed_weights") is None
