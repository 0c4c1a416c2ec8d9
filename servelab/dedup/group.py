"""Group duplicates: exact copies by MD5, near-duplicates by cosine similarity >= threshold.

Pairs above the threshold are found without an N x N matrix:
- `exact`: blocked products over the upper triangle (block x block tiles), every pair checked.
  Cost grows with N^2: about 100 s for 100k photos on 2 loaded cores, fine up to ~20k.
- `lsh`: sign-random-projection hashing (SimHash bands). Each band is `bits` sign bits drawn from a pool of
  random hyperplanes; photos that share a band value are candidates, and every candidate is verified with the
  exact cosine, so there are no false pairs. The number of bands is chosen so that a pair exactly *at* the
  threshold is found with probability >= `recall` (0.999 by default, for independent hyperplanes; more similar
  pairs are found with higher probability). This is what keeps 100k photos within seconds and well under 1 GB.
- `auto`: exact up to 20,000 embeddings, lsh above. Band length shrinks for low thresholds; below about
  cosine 0.76 hashing stops paying off and the exact search is used.
Near-duplicate edges follow a `Rule` (cosine threshold and/or pHash Hamming distance); pairs a user marked
"not a duplicate" are dropped. Groups are connected components (union-find) over MD5-equal pairs and the kept
edges, and each group names the rule that formed it.

Safe defaults (`default_rule`): a deleting tool must not propose wrong deletions by default. Evidence, from
the project's own labelled generator (`servelab.dedup.evaluate.build_set`: generated photos, each with seven
transformed copies, plus distinct negatives; 320 px; grouped pairwise, a pair called when both land in one
group) with the offline random-init ViT-B/32 through the ONNX engine: grouping by cosine >= 0.92 alone put
unrelated photos together (pairwise precision 0.03 and 0.03 with 24 bases, 0.12 and 0.72 with 8 bases at
seeds 0 and 3: random-init cosine does not separate photos), while pHash distance <= 14 alone reached precision 1.00 in every run, recall 0.92-0.93
with 24 bases (seeds 0, 1) and 0.80-0.94 with 8 bases (seeds 0-5). Distance 12 lost recall (0.74-0.90);
16 and 18 lost precision on some seeds (0.79-0.94). So random-init weights (and a catalog with no
embeddings yet) group by pHash agreement alone. `servelab dedup evaluate` reports the figures at the defaults. Pretrained CLIP or a checkpoint could
not be calibrated here (no weights can be downloaded): their default keeps cosine >= 0.92 *and* requires pHash
agreement, so it is never less safe than the pHash rule. Calibrate with `servelab dedup evaluate` before
relaxing it (`--cosine-only`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from servelab.dedup.catalog import Catalog
from servelab.errors import InvalidValue

AUTO_EXACT_MAX = 20_000
MAX_BANDS = 400
DEFAULT_PHASH_MAX = 14   # pHash Hamming distance (of 64 bits) for the default rule; see the module docstring
DEFAULT_COSINE = 0.92    # cosine threshold kept for weights that are not random-init (uncalibrated here)


@dataclass(frozen=True)
class Rule:
    """When two photos are near-duplicates: cosine >= `cosine` (if set) and pHash distance <= `phash_max` (if set)."""

    cosine: float | None
    phash_max: int | None
    source: str  # why this rule: "default for random-init weights", "as given", ...

    def __post_init__(self):
        if self.cosine is None and self.phash_max is None:
            raise InvalidValue("a near-duplicate rule needs a cosine threshold, a pHash distance, or both")
        if self.cosine is not None and not -1.0 <= self.cosine <= 1.0:
            raise InvalidValue(f"cosine threshold must be between -1 and 1, got {self.cosine}")
        if self.phash_max is not None and not 0 <= self.phash_max <= 64:
            raise InvalidValue(f"pHash distance must be between 0 and 64, got {self.phash_max}")

    def describe(self) -> str:
        parts = []
        if self.cosine is not None:
            parts.append(f"cosine ≥ {self.cosine:g}")
        if self.phash_max is not None:
            parts.append(f"pHash distance ≤ {self.phash_max}")
        return " and ".join(parts)

    def as_dict(self) -> dict:
        return {"cosine": self.cosine, "phash_max": self.phash_max, "text": self.describe(), "source": self.source}


EXACT_RULE = "identical bytes (MD5)"


def default_rule(weights: str | None) -> Rule:
    """The safe default for the weights that produced the catalog's embeddings (see the module docstring)."""
    from servelab.model.weights import is_random_init

    if not weights:
        return Rule(None, DEFAULT_PHASH_MAX, "default without embeddings: pHash agreement")
    if is_random_init(weights):
        return Rule(None, DEFAULT_PHASH_MAX, "default for random-init weights: their cosine does not separate photos")
    return Rule(DEFAULT_COSINE, DEFAULT_PHASH_MAX,
                "default for these weights: cosine threshold not calibrated here, so pHash agreement is required too")


def choose_rule(weights: str | None, threshold: float | None = None, phash_max: int | None = None,
                cosine_only: bool = False) -> Rule:
    """The rule from the caller's settings, falling back to `default_rule(weights)` for what is not given."""
    if threshold is None and phash_max is None and not cosine_only:
        return default_rule(weights)
    base = default_rule(weights)
    cosine = threshold if threshold is not None else (base.cosine if base.cosine is not None else DEFAULT_COSINE)
    if cosine_only:
        if phash_max is not None:
            raise InvalidValue("--cosine-only drops the pHash condition; do not also give --phash-max")
        return Rule(cosine, None, "as given: cosine only (no pHash agreement; unsafe with random-init weights)")
    if threshold is None:
        return Rule(base.cosine, phash_max, "as given (pHash distance); cosine as by default")
    return Rule(cosine, phash_max if phash_max is not None else base.phash_max,
                "as given" if phash_max is not None else "as given (cosine); pHash agreement as by default")


# --- pair search -------------------------------------------------------------------------------------------
def similar_pairs(emb: np.ndarray, threshold: float, method: str = "auto", block: int = 4096,
                  bits: int = 22, pool: int = 1024, recall: float = 0.999, seed: int = 0
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(i, j, cosine) for all i < j with cosine >= threshold; rows of `emb` must be L2-normalised."""
    emb = np.ascontiguousarray(emb, dtype=np.float32)
    n = len(emb)
    if method == "auto":
        method = "exact" if n <= AUTO_EXACT_MAX else "lsh"
    if n < 2:
        return _empty()
    if method == "exact":
        return _exact_pairs(emb, threshold, block)
    if method == "lsh":
        while bits > 16 and lsh_bands(threshold, bits, recall) > MAX_BANDS:
            bits -= 1  # low thresholds need shorter bands to keep the number of bands sane
        if lsh_bands(threshold, bits, recall) > MAX_BANDS:
            # hashing cannot separate pairs this dissimilar efficiently; exact is the honest choice
            return _exact_pairs(emb, threshold, block)
        return _lsh_pairs(emb, threshold, bits, pool, recall, seed)
    raise InvalidValue(f"method must be auto, exact or lsh, got {method!r}")


def _empty():
    return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32)


def _exact_pairs(emb, threshold, block):
    n = len(emb)
    found_i, found_j, found_s = [], [], []
    for a in range(0, n, block):
        xa = emb[a:a + block]
        for b in range(a, n, block):
            sims = xa @ emb[b:b + block].T
            ii, jj = np.nonzero(sims >= threshold)
            gi, gj = ii + a, jj + b
            keep = gi < gj
            found_i.append(gi[keep])
            found_j.append(gj[keep])
            found_s.append(sims[ii[keep], jj[keep]])
    return np.concatenate(found_i).astype(np.int64), np.concatenate(found_j).astype(np.int64), np.concatenate(found_s).astype(np.float32)


def lsh_bands(threshold: float, bits: int, recall: float) -> int:
    """Bands needed so that a pair with cosine == threshold shares at least one band with probability >= recall."""
    p_bit = 1.0 - math.acos(max(-1.0, min(1.0, threshold))) / math.pi
    p_band = p_bit ** bits
    return max(1, math.ceil(math.log(1.0 - recall) / math.log(1.0 - p_band)))


def _lsh_pairs(emb, threshold, bits, pool, recall, seed):
    n, d = emb.shape
    if bits > 31:
        raise InvalidValue("bits must be <= 31")
    rng = np.random.default_rng(seed)
    bands = lsh_bands(threshold, bits, recall)
    planes = rng.standard_normal((d, pool), dtype=np.float32)
    signs = np.empty((pool, n), dtype=np.uint8)  # one contiguous row per hyperplane (1 byte per sign)
    for s in range(0, n, 8192):
        signs[:, s:s + 8192] = ((emb[s:s + 8192] @ planes) > 0).T
    del planes
    cand = []
    key = np.empty(n, dtype=np.uint32)
    for _ in range(bands):
        key[:] = 0
        for shift, plane in enumerate(rng.choice(pool, bits, replace=False)):
            key |= signs[plane].astype(np.uint32) << np.uint32(shift)
        order = np.argsort(key, kind="stable")
        ks = key[order]
        off = 1
        while off < n:
            m = ks[:-off] == ks[off:]
            if not m.any():
                break
            i1, i2 = order[:-off][m], order[off:][m]
            cand.append(np.minimum(i1, i2).astype(np.int64) * n + np.maximum(i1, i2))
            off += 1
    del signs
    if not cand:
        return _empty()
    cand = np.unique(np.concatenate(cand))
    found_i, found_j, found_s = [], [], []
    for s in range(0, len(cand), 65536):  # verify in chunks: exact cosine, bounded memory
        c = cand[s:s + 65536]
        i, j = c // n, c % n
        sims = np.einsum("ij,ij->i", emb[i], emb[j])
        keep = sims >= threshold
        found_i.append(i[keep])
        found_j.append(j[keep])
        found_s.append(sims[keep])
    return np.concatenate(found_i), np.concatenate(found_j), np.concatenate(found_s).astype(np.float32)


def phash_pairs(hashes: list[str], max_distance: int, method: str = "auto") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(i, j, distance) for all i < j whose 64-bit pHashes (hex) differ in <= max_distance bits.

    Each hash becomes a +-1/8 vector of its bits, whose dot product is exactly 1 - 2 * distance / 64, so the
    same blocked search as for embeddings finds the pairs (BLAS products, no N x N matrix)."""
    if len(hashes) < 2:
        return _empty()
    words = np.array([int(x, 16) for x in hashes], dtype=">u8")
    bits = np.unpackbits(words.view(np.uint8)).reshape(len(hashes), 64)
    vec = np.where(bits == 1, 0.125, -0.125).astype(np.float32)
    i, j, cos = similar_pairs(vec, 1.0 - (2 * max_distance + 1) / 64, method=method)
    return i, j, np.rint((1.0 - cos) * 32).astype(np.float32)


# --- components --------------------------------------------------------------------------------------------
class UnionFind:
    def __init__(self, n: int):
        self.parent = np.arange(n)

    def find(self, x: int) -> int:
        p = self.parent
        root = x
        while p[root] != root:
            root = p[root]
        while p[x] != root:
            p[x], x = root, p[x]
        return root

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)


def components(n: int, i: np.ndarray, j: np.ndarray) -> list[list[int]]:
    """Connected components (size >= 2) of the graph on 0..n-1 with edges (i, j)."""
    uf = UnionFind(n)
    for a, b in zip(i.tolist(), j.tolist(), strict=False):
        uf.union(a, b)
    groups: dict[int, list[int]] = {}
    for x in set(i.tolist()) | set(j.tolist()):
        groups.setdefault(uf.find(x), []).append(x)
    return [sorted(g) for g in groups.values() if len(g) > 1]


def hamming_hex(a: str, b: str) -> int:
    return bin(int(a, 16) ^ int(b, 16)).count("1")


# --- catalog grouping --------------------------------------------------------------------------------------
@dataclass
class Group:
    kind: str  # exact (all members byte-identical) | near
    ids: list[int]
    members: list[dict] = field(default_factory=list)
    edges: list[dict] = field(default_factory=list)  # {"a", "b", "cosine", "phash_distance", "md5_equal"}
    rule: str = EXACT_RULE  # what formed the group: EXACT_RULE, or the near-duplicate rule's text

    @property
    def key(self) -> int:
        return min(self.ids)

    def as_dict(self) -> dict:
        return {"group": self.key, "kind": self.kind, "size": len(self.ids), "rule": self.rule,
                "members": self.members, "edges": self.edges}


def group(catalog: str | Path | Catalog, threshold: float | None = None, phash_max: int | None = None,
          method: str = "auto", near: bool = True, cache: dict | None = None, cosine_only: bool = False,
          rule: Rule | None = None) -> list[Group]:
    """Duplicate groups in the catalog, largest first.

    The near-duplicate rule is `rule`, else `choose_rule(weights, threshold, phash_max, cosine_only)`: what is
    not given comes from the safe default for the catalog's weights. near=False groups only exact (MD5)
    copies. Embeddings are used only when they all come from the same weights (the catalog's latest). `cache`
    (a dict the caller keeps) lets a long-running caller such as the review UI reuse the pair search after
    deletes, undos and feedback. `rule_for(catalog, …)` gives the rule without grouping.
    """
    cat = catalog if isinstance(catalog, Catalog) else Catalog(catalog)
    try:
        weights = cat.get_meta("embed_weights")
        rule = rule or choose_rule(weights, threshold, phash_max, cosine_only)
        rows = cat.files("ok")
        index = {r["id"]: k for k, r in enumerate(rows)}
        edges: dict[tuple[int, int], dict] = {}
        by_md5: dict[str, list[int]] = {}
        for r in rows:
            by_md5.setdefault(r["md5"], []).append(r["id"])
        for ids in by_md5.values():
            for a, b in zip(ids, ids[1:], strict=False):  # a chain suffices for components
                edges[(a, b)] = {"a": a, "b": b, "cosine": None, "md5_equal": True}
        if near:
            for a, b, s in _near_pairs(cat, rows, weights, rule, method, cache):
                if a in index and b in index:
                    e = edges.setdefault((a, b), {"a": a, "b": b, "cosine": None, "md5_equal": False})
                    if s is not None:
                        e["cosine"] = round(float(s), 5)
        rejected = cat.not_duplicate_pairs()
        kept = []
        for (a, b), e in edges.items():
            if (a, b) in rejected:
                continue
            ra, rb = rows[index[a]], rows[index[b]]
            e["md5_equal"] = ra["md5"] == rb["md5"]
            e["phash_distance"] = hamming_hex(ra["phash"], rb["phash"]) if ra["phash"] and rb["phash"] else None
            if not e["md5_equal"] and rule.phash_max is not None and (
                    e["phash_distance"] is None or e["phash_distance"] > rule.phash_max):
                continue
            kept.append(e)
        _fill_cosines(cat, weights, [e for e in kept if e["cosine"] is None and not e["md5_equal"]])
        li = np.array([index[e["a"]] for e in kept], dtype=np.int64)
        lj = np.array([index[e["b"]] for e in kept], dtype=np.int64)
        out = []
        for comp in components(len(rows), li, lj):
            members = [rows[k] for k in comp]
            gids = [m["id"] for m in members]
            gset = set(gids)
            exact = len({m["md5"] for m in members}) == 1
            gedges = [e for e in kept if e["a"] in gset]
            why = EXACT_RULE if exact else rule.describe()
            if not exact and any(e["md5_equal"] for e in gedges):
                why += f"; some members by {EXACT_RULE}"
            g = Group(kind="exact" if exact else "near", ids=gids, members=[member_dict(m) for m in members],
                      edges=gedges, rule=why)
            out.append(g)
        out.sort(key=lambda g: (-len(g.ids), g.key))
        return out
    finally:
        if not isinstance(catalog, Catalog):
            cat.close()


def rule_for(catalog: Catalog, threshold: float | None = None, phash_max: int | None = None,
             cosine_only: bool = False) -> Rule:
    """The rule `group` applies to this catalog with these settings (for headers and JSON)."""
    return choose_rule(catalog.get_meta("embed_weights"), threshold, phash_max, cosine_only)


def _near_pairs(cat: Catalog, rows, weights, rule: Rule, method, cache):
    """[(id_a, id_b, cosine or None)] candidate pairs, from the cache when the ids are a subset of the cached ones.

    With a cosine threshold the candidates come from the embeddings (pHash is checked afterwards); a pHash-only
    rule searches the pHashes directly, so it needs no embeddings at all.
    """
    if rule.cosine is None:
        key = ("phash", rule.phash_max)
        hashed = [r for r in rows if r["phash"]]
        current = {r["id"] for r in hashed}
    else:
        key = ("cosine", weights, float(rule.cosine), method)
        current = {r[0] for r in cat.db.execute(
            "SELECT id FROM files WHERE status='ok' AND embedding IS NOT NULL AND embed_weights IS ?", (weights,))}
    if cache is not None and cache.get("key") == key and current <= cache["ids"]:
        return cache["pairs"]
    pairs = []
    if rule.cosine is None:
        ids = np.array([r["id"] for r in hashed], dtype=np.int64)
        pi, pj, _ = phash_pairs([r["phash"] for r in hashed], rule.phash_max)
        pairs = [(a, b, None) for a, b in zip(ids[pi].tolist(), ids[pj].tolist(), strict=False)]
    else:
        ids, emb = cat.embeddings(weights)
        if len(ids):
            pi, pj, ps = similar_pairs(emb, rule.cosine, method=method)
            pairs = list(zip(ids[pi].tolist(), ids[pj].tolist(), ps.tolist(), strict=False))
    if cache is not None:
        cache.update(key=key, ids=set(current), pairs=pairs)
    return pairs


def _fill_cosines(cat: Catalog, weights, edges: list[dict]) -> None:
    """Annotate edges found without embeddings (pHash rule) with their cosine, when both photos are embedded."""
    if not edges or not weights:
        return
    wanted = sorted({e["a"] for e in edges} | {e["b"] for e in edges})
    vec = {}
    for s in range(0, len(wanted), 500):  # stay under SQLite's bound-parameter limit
        chunk = wanted[s:s + 500]
        vec.update({r[0]: np.frombuffer(r[1], dtype=np.float32) for r in cat.db.execute(
            f"SELECT id, embedding FROM files WHERE id IN ({','.join('?' * len(chunk))}) "
            "AND embedding IS NOT NULL AND embed_weights IS ?", (*chunk, weights))})
    for e in edges:
        if e["a"] in vec and e["b"] in vec:
            e["cosine"] = round(float(vec[e["a"]] @ vec[e["b"]]), 5)


def member_dict(r) -> dict:
    return {"id": r["id"], "path": r["path"], "size": r["size"], "width": r["width"], "height": r["height"],
            "md5": r["md5"], "phash": r["phash"], "taken": r["taken"], "mtime_ns": r["mtime_ns"], "format": r["format"]}
