"""Near-duplicate photo finder: scan, embed, group, review, evaluate.

Public Python API (what `servelab dedup …` and the notebooks call):

    from servelab.dedup import Catalog, scan, embed, group, evaluate, trash_files, restore
    from servelab.client import InferenceClient

    rep = scan(root, catalog)                 # -> ScanReport(seen, new, updated, unchanged, missing, problems)
                                              #    catalog: path (e.g. default_catalog(root)) or Catalog
    with InferenceClient(mode="local") as client:
        embed(catalog, client, batch_size=16) # -> EmbedReport; resumable, commits every batch; a server that
                                              #    dies mid-run raises EmbedStopped (a rerun finishes)
    groups = group(catalog)                   # -> [Group(kind "exact"|"near", ids, members, edges, rule)], largest
                                              #    first, by the safe default rule for the catalog's weights
                                              #    (threshold=, phash_max=, cosine_only= override it);
                                              #    g.as_dict() is what `servelab dedup groups --json` prints
    similar_pairs(emb, threshold, method="auto"|"exact"|"lsh") -> (i, j, cosine) without an N x N matrix
    with Catalog(catalog) as cat:
        res = trash_files(cat, [file_id, ...], keeper=id)   # move to <root>/.servelab/trash + manifest.jsonl
        restore(cat, res["batch"])                          # undo: back to the original paths; -> {"batch",
                                                            #   "restored", "failed": [{"original", "reason"}]}
        recover(cat)   # close a delete/undo that was killed half-way (trash commands, scan and the UI call it)
    # each of these (and scan) holds the folder lock (servelab.dedup.lock) while it moves files: a second
    # process waits up to Catalog(..., lock_wait_s=) seconds, then gets FolderBusy naming the holder
    evaluate(out_dir, client, n_base=24, n_negatives=24, size=320)
                                              # -> {"csv", "markdown", "plot", "summary", "metrics", ...}
    bench_group(n=100_000, dim=512, out="results")  # grouping benchmark record (servelab.dedup.group_bench)
    create_app(catalog)                       # the review UI (servelab.dedup.review); `servelab dedup review`

The catalog defaults to ROOT/.servelab/catalog.sqlite; that folder (and the trash in it) is never scanned.
The model is reached only through `servelab.client.InferenceClient`, so any mode/backend works.
"""

from servelab.dedup.catalog import Catalog, OutsideRoot, default_catalog, safe_path
from servelab.dedup.embed import EmbedReport, EmbedStopped, embed
from servelab.dedup.group import Group, group, similar_pairs
from servelab.dedup.scan import ScanReport, scan
from servelab.dedup.trash import TrashError, batches, recover, restore, trash_files


def evaluate(out, client, **kwargs):
    """See servelab.dedup.evaluate.evaluate (imported lazily: it pulls in matplotlib)."""
    from servelab.dedup.evaluate import evaluate as _evaluate

    return _evaluate(out, client, **kwargs)


def bench_group(**kwargs):
    from servelab.dedup.group_bench import bench_group as _bench

    return _bench(**kwargs)


__all__ = ["Catalog", "OutsideRoot", "default_catalog", "safe_path", "scan", "ScanReport", "embed", "EmbedReport", "EmbedStopped",
           "group", "Group", "similar_pairs", "trash_files", "restore", "recover", "batches", "TrashError", "evaluate",
           "bench_group"]
