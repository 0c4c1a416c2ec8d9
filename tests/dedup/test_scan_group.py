"""Scan + embed + group on a generated folder whose duplicate groups are known."""

from __future__ import annotations

import json
import os

import numpy as np

from servelab.dedup import Catalog, embed, group, scan, similar_pairs
from servelab.dedup.catalog import default_catalog
from servelab.dedup.group import EXACT_RULE, rule_for

from .conftest import PHASH_MAX, THRESHOLD, cli


def _groups_as_paths(groups):
    return {frozenset(m["path"] for m in g.members): g.kind for g in groups}


def test_scan_embed_group_finds_the_known_groups(known_set, dedup_client):
    root, expected = known_set
    cat_path = default_catalog(root)
    rep = scan(root, cat_path)
    assert rep.new == 13 and not rep.problems, rep.problems
    with Catalog(cat_path) as cat:
        rows = {r["path"]: r for r in cat.files("ok")}
        assert rows["a.jpg"]["md5"] == rows["copies/a_copy.jpg"]["md5"] != rows["a_resized.png"]["md5"]
        assert len(rows["a.jpg"]["phash"]) == 16 and len(rows["a.jpg"]["dhash"]) == 16
        assert (rows["a_resized.png"]["width"], rows["a_resized.png"]["height"]) == (192, 144)
        assert rows["deep/x/c.webp"]["format"] == "WEBP"
        rot = rows["rotated.jpg"]
        assert (rot["orientation"], rot["taken"]) == (6, "2021:07:04 10:30:00")
        assert (rot["width"], rot["height"]) == (200, 300)  # upright after EXIF orientation

        # exact groups work before any embedding exists
        exact_only = _groups_as_paths(group(cat, near=False))
        assert exact_only == {frozenset(expected["exact"][0]): "exact", frozenset({"a.jpg", "copies/a_copy.jpg"}): "exact"}

        er = embed(cat, dedup_client, batch_size=4, progress=False)
        assert (er.embedded, er.failed) == (13, 0)
        ids, emb = cat.embeddings()
        assert emb.shape == (13, 512) and np.allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-4)

        want = {frozenset(s): "near" for s in expected["near"]} | {frozenset(expected["exact"][0]): "exact"}
        for method in ("exact", "lsh"):
            got = group(cat, threshold=THRESHOLD, phash_max=PHASH_MAX, method=method)
            assert _groups_as_paths(got) == want, method
        near_a = next(g for g in got if "a.jpg" in {m["path"] for m in g.members})
        assert all(e["cosine"] is None or e["cosine"] >= THRESHOLD for e in near_a.edges)
        assert near_a.rule.startswith(f"cosine ≥ {THRESHOLD:g} and pHash distance ≤ {PHASH_MAX}")

        # the default for these (random-init) weights requires pHash agreement, and finds the same groups
        rule = rule_for(cat)
        assert rule.phash_max is not None and "random-init" in rule.source
        defaults = group(cat)
        assert _groups_as_paths(defaults) == want
        assert {g.rule for g in defaults if g.kind == "exact"} == {EXACT_RULE}
        assert all(rule.describe() in g.rule for g in defaults if g.kind == "near")

        # "not a duplicate" feedback splits a group away
        b_ids = [rows["b.jpg"]["id"], rows["b_q40.jpg"]["id"]]
        cat.add_not_duplicate(b_ids)
        after = _groups_as_paths(group(cat, threshold=THRESHOLD, phash_max=PHASH_MAX))
        assert frozenset({"b.jpg", "b_q40.jpg"}) not in after and len(after) == len(want) - 1

    # the CLI prints the same groups as JSON for scripting, each with the rule that formed it
    doc = json.loads(cli("groups", root, "--json", "--threshold", THRESHOLD, "--phash-max", PHASH_MAX).stdout)
    assert doc["weights"] == dedup_client.weights
    assert (doc["rule"]["cosine"], doc["rule"]["phash_max"], doc["rule"]["source"]) == (THRESHOLD, PHASH_MAX, "as given")
    assert {frozenset(m["path"] for m in g["members"]) for g in doc["groups"]} == set(after)
    assert all(set(g["members"][0]) >= {"id", "path", "size", "width", "height", "md5"} for g in doc["groups"])
    assert {g["kind"]: g["rule"] for g in doc["groups"] if g["size"] == 2} == {
        "near": f"cosine ≥ {THRESHOLD:g} and pHash distance ≤ {PHASH_MAX}", "exact": EXACT_RULE}
    text = cli("groups", root).stdout  # defaults: the rule is named in the header and on every group
    assert f"near-duplicates: {rule.describe()} (default for random-init weights" in text.splitlines()[0]
    assert f"[exact] 2 photos, by {EXACT_RULE}" in text and f"[near] 2 photos, by {rule.describe()}" in text
    proc = cli("groups", root, "--cosine-only", "--phash-max", 3, check=False)
    assert proc.returncode == 1 and proc.stderr.startswith("error: --cosine-only drops the pHash condition")


def test_rescan_is_incremental_and_embedding_follows_changes(known_set, dedup_client):
    root, _ = known_set
    cat_path = default_catalog(root)
    scan(root, cat_path)
    with Catalog(cat_path) as cat:
        embed(cat, dedup_client, progress=False)
    rep = scan(root, cat_path)
    assert (rep.new, rep.updated, rep.unchanged, rep.missing) == (0, 0, 13, 0)
    (root / "b_q40.jpg").write_bytes((root / "c.jpg").read_bytes())  # content changes
    (root / "single_2.jpg").unlink()
    rep = scan(root, cat_path)
    assert (rep.new, rep.updated, rep.unchanged, rep.missing) == (0, 1, 11, 1)
    with Catalog(cat_path) as cat:
        assert cat.counts()["embedded"] == 11  # the changed file lost its stale embedding
        assert embed(cat, dedup_client, progress=False).embedded == 1
        changed = [r for r in cat.files("ok") if r["path"] in ("b_q40.jpg", "c.jpg")]
        assert changed[0]["md5"] == changed[1]["md5"]


def test_lsh_pairs_match_exact_pairs():
    rng = np.random.default_rng(7)
    x = rng.standard_normal((3000, 512), dtype=np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    a, b = np.arange(0, 80), np.arange(1000, 1080)
    noise = rng.standard_normal((80, 512), dtype=np.float32)
    noise -= (noise * x[a]).sum(1, keepdims=True) * x[a]
    noise /= np.linalg.norm(noise, axis=1, keepdims=True)
    c = rng.uniform(0.93, 1.0, (80, 1)).astype(np.float32)
    x[b] = c * x[a] + np.sqrt(1 - c ** 2) * noise
    ei, ej, es = similar_pairs(x, 0.92, method="exact", block=512)
    li, lj, ls = similar_pairs(x, 0.92, method="lsh")
    exact = set(zip(ei.tolist(), ej.tolist(), strict=False))
    assert exact == {(int(p), int(q)) for p, q in zip(a, b, strict=False)}
    assert set(zip(li.tolist(), lj.tolist(), strict=False)) == exact
    assert np.all(es >= 0.92) and np.all(ls >= 0.92)


def test_cli_reports_missing_catalog_in_one_line(tmp_path):
    proc = cli("groups", tmp_path, check=False)
    assert proc.returncode == 1
    assert proc.stderr.strip().startswith("error: no catalog at") and len(proc.stderr.strip().splitlines()) == 1
    assert not os.path.exists(default_catalog(tmp_path))


def test_phash_pairs_match_brute_force_hamming_distances():
    from servelab.dedup.group import hamming_hex, phash_pairs

    rng = np.random.default_rng(11)
    base = rng.integers(0, 2**63, 400, dtype=np.int64).astype(np.uint64)
    near = [int(b) ^ sum(1 << int(k) for k in rng.choice(64, size=rng.integers(10, 19), replace=False))
            for b in base[:60]]  # 10..18 bits flipped: on both sides of the limit
    hashes = [f"{int(h):016x}" for h in base] + [f"{h:016x}" for h in near]
    i, j, d = phash_pairs(hashes, 14)
    brute = {(a, b) for a in range(len(hashes)) for b in range(a + 1, len(hashes))
             if hamming_hex(hashes[a], hashes[b]) <= 14}
    assert set(zip(i.tolist(), j.tolist(), strict=True)) == brute and len(brute) > 20
    assert all(hamming_hex(hashes[a], hashes[b]) == k for a, b, k in zip(i.tolist(), j.tolist(), d.tolist(), strict=True))
