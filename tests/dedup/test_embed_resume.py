"""An embedding run that dies part-way keeps its finished batches; the rerun embeds only the rest."""

from __future__ import annotations

import numpy as np
import pytest

from servelab.data import encode, synthetic_photo
from servelab.dedup import Catalog, embed, scan


class FlakyClient:
    """The real local client, wrapped to count what it is sent and to die after `fail_after` batches."""

    def __init__(self, client, fail_after=None):
        self.client, self.fail_after = client, fail_after
        self.batches = self.images = 0

    @property
    def weights(self):
        return self.client.weights

    @property
    def mode_used(self):
        return self.client.mode_used

    def embed_images(self, blobs):
        if self.fail_after is not None and self.batches >= self.fail_after:
            raise KeyboardInterrupt("simulated interruption")
        self.batches += 1
        self.images += len(blobs)
        return self.client.embed_images(blobs)


def _scanned_folder(tmp_path, n: int, seed: int, size: tuple[int, int]):
    """n generated photos p00.jpg… in tmp_path/photos, scanned into tmp_path/catalog.sqlite."""
    root = tmp_path / "photos"
    root.mkdir()
    for i in range(n):
        (root / f"p{i:02d}.jpg").write_bytes(encode(synthetic_photo(seed + i, size)))
    cat_path = tmp_path / "catalog.sqlite"
    scan(root, cat_path)
    return root, cat_path


def test_interrupted_embedding_resumes_without_recomputing(tmp_path, dedup_client):
    root, cat_path = _scanned_folder(tmp_path, 14, 300, (160, 120))

    first = FlakyClient(dedup_client, fail_after=2)
    with pytest.raises(KeyboardInterrupt):
        embed(cat_path, first, batch_size=4, progress=False)
    with Catalog(cat_path) as cat:
        ids_done, emb_done = cat.embeddings()
        assert len(ids_done) == 8 == first.images  # two whole batches were committed

    second = FlakyClient(dedup_client)
    rep = embed(cat_path, second, batch_size=4, progress=False)
    assert (rep.embedded, rep.already, second.images) == (6, 8, 6)  # only the rest was sent
    with Catalog(cat_path) as cat:
        ids, emb = cat.embeddings()
        assert len(ids) == 14
        before = dict(zip(ids_done.tolist(), emb_done, strict=False))
        for i, e in zip(ids.tolist(), emb, strict=False):
            if i in before:
                assert np.array_equal(before[i], e)  # finished work untouched
        paths = [cat.file(i)["path"] for i in ids.tolist()]
    direct = dedup_client.embed_images([(root / p).read_bytes() for p in paths])
    assert np.min(np.sum(direct * emb, axis=1)) > 0.9999  # every stored vector belongs to its own photo
    assert embed(cat_path, FlakyClient(dedup_client, fail_after=0), progress=False).embedded == 0  # nothing left


def test_a_file_that_went_bad_after_the_scan_does_not_stop_the_batch(tmp_path, dedup_client):
    root, cat_path = _scanned_folder(tmp_path, 5, 400, (120, 90))
    (root / "p02.jpg").write_bytes(b"no longer a photo")  # changed after the scan
    rep = embed(cat_path, dedup_client, batch_size=8, progress=False)
    assert (rep.embedded, rep.failed) == (4, 1)
    with Catalog(cat_path) as cat:
        probs = cat.problems()
        assert [(p["path"], p["kind"]) for p in probs] == [("p02.jpg", "embed_failed")]
        assert "not a recognised image" in probs[0]["reason"]
        assert cat.counts()["embedded"] == 4
    assert embed(cat_path, dedup_client, progress=False).todo == 0  # not retried for the same weights
    scan(root, cat_path)  # the rescan sees the change and records the real problem
    with Catalog(cat_path) as cat:
        assert [(p["path"], p["kind"]) for p in cat.problems()] == [("p02.jpg", "not_an_image")]


def test_several_workers_embed_every_photo_once_through_a_real_service(tmp_path, service, dedup_client):
    """workers=3 keeps three batches in flight on three connections to the service; every photo is stored once,
    with its own vector, and the extra connections are closed afterwards."""
    from servelab.client import InferenceClient

    root, cat_path = _scanned_folder(tmp_path, 13, 500, (160, 120))
    with InferenceClient(mode="remote", backend="fastapi", url=service.url) as client:
        rep = embed(cat_path, client, batch_size=2, progress=False, workers=3)
        assert (rep.todo, rep.embedded, rep.failed) == (13, 13, 0)
    with Catalog(cat_path) as cat:
        ids, emb = cat.embeddings()
        paths = [cat.file(i)["path"] for i in ids.tolist()]
    assert len(ids) == 13
    direct = dedup_client.embed_images([(root / p).read_bytes() for p in paths])
    assert np.min(np.sum(direct * emb, axis=1)) > 0.999  # each vector belongs to its own photo


def test_workers_need_a_server(tmp_path, dedup_client):
    _, cat_path = _scanned_folder(tmp_path, 2, 600, (64, 48))
    with pytest.raises(ValueError, match="needs a server"):
        embed(cat_path, dedup_client, workers=2, progress=False)
