"""`servelab dedup …` commands: scan, embed, groups, review, delete, undo, trash, problems, evaluate, bench-group.

Every command takes the photo folder (ROOT, default `.`); the catalog lives in ROOT/.servelab/catalog.sqlite
unless --catalog says otherwise.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

from servelab.config import REVIEW_PORT
from servelab.errors import CannotRun, InvalidValue

app = typer.Typer(no_args_is_help=True)

ROOT_ARG = typer.Argument(Path("."), help="photo folder (the scanned root)")
CATALOG_OPT = typer.Option(None, "--catalog", help="catalog file (default ROOT/.servelab/catalog.sqlite)")
LOCK_WAIT_OPT = typer.Option(None, "--lock-wait", min=0,
                             help="seconds to wait while another process moves files in ROOT (default 10)")


def _catalog_path(root: Path, catalog: Path | None) -> Path:
    from servelab.dedup.catalog import default_catalog

    path = catalog or default_catalog(root)
    return path


def _open(root: Path, catalog: Path | None, lock_wait: float | None = None):
    from servelab.dedup.catalog import Catalog

    path = _catalog_path(root, catalog)
    if not path.exists():
        raise FileNotFoundError(f"no catalog at {path}: run `servelab dedup scan {root}` first")
    return Catalog(path, lock_wait_s=lock_wait)


@app.command()
def scan(root: Path = ROOT_ARG, catalog: Path | None = CATALOG_OPT, lock_wait: float | None = LOCK_WAIT_OPT,
         progress: bool = typer.Option(True, help="show a progress bar"),
         as_json: bool = typer.Option(False, "--json", help="print the full report as JSON")):
    """Scan ROOT recursively (JPEG/PNG/WebP) into the catalog; unchanged files are skipped."""
    from servelab.dedup.scan import scan as do_scan

    report = do_scan(root, _catalog_path(root, catalog), progress=progress, lock_wait_s=lock_wait)
    if as_json:
        typer.echo(json.dumps(report.as_dict(), indent=2))
        return
    typer.echo(f"scanned {report.seen} entries in {report.seconds} s: {report.new} new, {report.updated} updated, "
               f"{report.unchanged} unchanged, {report.missing} gone, {len(report.problems)} problems")
    for p in report.problems[:20]:
        typer.echo(f"  {p['status']:7} {p['kind']:20} {p['path']}: {p['reason']}")
    if len(report.problems) > 20:
        typer.echo(f"  … {len(report.problems) - 20} more: `servelab dedup problems {root}`")


@app.command()
def problems(root: Path = ROOT_ARG, catalog: Path | None = CATALOG_OPT,
             as_json: bool = typer.Option(False, "--json")):
    """List files that could not be catalogued, with the reason."""
    with _open(root, catalog) as cat:
        rows = cat.problems()
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
    for p in [] if as_json else rows:
        typer.echo(f"{p['status']:7} {p['kind']:20} {p['path']}: {p['reason']}")


@app.command()
def embed(root: Path = ROOT_ARG, catalog: Path | None = CATALOG_OPT,
          mode: str = typer.Option("auto", help="local | remote | auto"),
          backend: str = typer.Option("fastapi", help="fastapi | triton-http | triton-grpc"),
          url: str | None = typer.Option(None, help="server URL"),
          payload: str = typer.Option("jpeg", help="jpeg | tensor"),
          engine: str | None = typer.Option(None, help="local engine: torch | onnx | onnx-int8"),
          batch_size: int = typer.Option(16, help="images per request"),
          workers: int = typer.Option(1, help="requests in flight at once, each on its own connection (a server)"),
          progress: bool = typer.Option(True, help="show a progress bar")):
    """Embed catalogued photos (resumable: rerun continues where it stopped)."""
    from servelab.client import InferenceClient
    from servelab.dedup.embed import embed as do_embed

    if batch_size < 1 or workers < 1:
        raise InvalidValue("--batch-size and --workers must be >= 1")
    with _open(root, catalog) as cat, InferenceClient(mode=mode, backend=backend, url=url, payload=payload,
                                                     engine=engine) as client:
        rep = do_embed(cat, client, batch_size=batch_size, progress=progress, workers=workers)
    typer.echo(f"embedded {rep.embedded} photos ({rep.already} already done, {rep.failed} failed) "
               f"via {rep.mode_used}; weights: {rep.weights}")


THRESHOLD_OPT = typer.Option(None, help="cosine similarity for near-duplicates (default: safe for the catalog's "
                                          "weights; random-init weights use no cosine condition)")
PHASH_OPT = typer.Option(None, help="pHash Hamming distance a near-duplicate pair must stay within (default 14)")
COSINE_ONLY_OPT = typer.Option(False, help="drop the pHash condition (unsafe with random-init weights: calibrate "
                                          "first with `servelab dedup evaluate`)")


@app.command()
def groups(root: Path = ROOT_ARG, catalog: Path | None = CATALOG_OPT,
           threshold: float | None = THRESHOLD_OPT,
           phash_max: int | None = PHASH_OPT,
           cosine_only: bool = COSINE_ONLY_OPT,
           method: str = typer.Option("auto", help="auto | exact | lsh"),
           exact_only: bool = typer.Option(False, help="only byte-identical copies (MD5)"),
           as_json: bool = typer.Option(False, "--json", help="machine-readable output")):
    """Print duplicate groups (exact copies and near-duplicates), largest first, each with the rule that formed it."""
    from servelab.dedup.group import group, rule_for

    with _open(root, catalog) as cat:
        rule = rule_for(cat, threshold, phash_max, cosine_only)
        gs = group(cat, rule=rule, method=method, near=not exact_only)
        doc = {"root": str(cat.root), "weights": cat.get_meta("embed_weights"),
               "rule": rule.as_dict() if not exact_only else None, "groups": [g.as_dict() for g in gs]}
    if as_json:
        typer.echo(json.dumps(doc, indent=2))
        return
    near_rule = f"near-duplicates: {rule.describe()} ({rule.source})" if not exact_only else "exact copies only"
    typer.echo(f"{len(gs)} groups; {near_rule}; weights {doc['weights']}")
    for g in gs:
        typer.echo(f"[{g.kind}] {len(g.ids)} photos, by {g.rule}")
        for m in g.members:
            typer.echo(f"    #{m['id']:<6} {m['width']}x{m['height']} {m['size']:>10} B  {m['path']}")


@app.command()
def review(root: Path = ROOT_ARG, catalog: Path | None = CATALOG_OPT,
           host: str = typer.Option("127.0.0.1", help="bind address (anything but loopback needs --allow-remote)"),
           port: int = typer.Option(REVIEW_PORT, help="port"),
           allow_remote: bool = typer.Option(False, "--allow-remote",
                                             help="let other machines reach the UI (see every photo, delete them)"),
           allowed_host: list[str] = typer.Option([], "--allowed-host",
                                                  help="another name the UI answers to (a DNS alias); repeatable"),
           threshold: float | None = THRESHOLD_OPT,
           phash_max: int | None = PHASH_OPT,
           cosine_only: bool = COSINE_ONLY_OPT,
           method: str = typer.Option("auto", help="auto | exact | lsh")):
    """Open the review UI (FastAPI + HTML) at http://HOST:PORT."""
    from servelab.dedup.hostcheck import is_loopback
    from servelab.dedup.review import serve
    from servelab.netutil import port_in_use

    path = _catalog_path(root, catalog)
    if not path.exists():
        raise FileNotFoundError(f"no catalog at {path}: run `servelab dedup scan {root}` first")
    if not is_loopback(host):
        who = ("anyone who can reach this machine" if host in ("0.0.0.0", "::", "")
               else f"anyone who can reach {host}")
        exposure = (f"on {host}:{port}, {who} on port {port} can see every photo under {root} and move them to "
                    "the trash")
        if not allow_remote:
            raise InvalidValue(f"{exposure}; add --allow-remote if that is what you want (or keep the default "
                               "127.0.0.1 and use an SSH tunnel)")
        typer.echo(f"warning: {exposure} (--allow-remote given)", err=True)
    if port_in_use(port, host):
        raise CannotRun(f"port {port} on {host} is already in use; pick another with --port")
    typer.echo(f"review UI on http://{host}:{port}  (Ctrl-C to stop)")
    serve(path, host=host, port=port, threshold=threshold, phash_max=phash_max, cosine_only=cosine_only,
          method=method, allowed_hosts=tuple(allowed_host))


@app.command()
def delete(ids: list[int] = typer.Argument(..., help="catalog ids of the files to move to the trash"),
           root: Path = typer.Option(Path("."), "--root", help="photo folder"),
           catalog: Path | None = CATALOG_OPT, lock_wait: float | None = LOCK_WAIT_OPT,
           keeper: int | None = typer.Option(None, help="id kept (refused if also listed)")):
    """Move files (by catalog id) into the trash; `servelab dedup undo` brings them back."""
    from servelab.dedup.trash import trash_files

    with _open(root, catalog, lock_wait) as cat:
        res = trash_files(cat, ids, keeper=keeper, note="cli")
    typer.echo(f"moved {len(res['files'])} file(s) to the trash, batch {res['batch']}")


@app.command()
def undo(root: Path = typer.Option(Path("."), "--root", help="photo folder"), catalog: Path | None = CATALOG_OPT,
         lock_wait: float | None = LOCK_WAIT_OPT,
         batch: str | None = typer.Option(None, help="batch id (default: the newest batch still in the trash)")):
    """Restore a trash batch to its original paths."""
    from servelab.dedup.trash import restore

    with _open(root, catalog, lock_wait) as cat:
        res = restore(cat, batch)
    typer.echo(f"restored {len(res['restored'])} file(s) from batch {res['batch']}")
    if res["failed"]:
        named = "; ".join(f"{f['original']}: {f['reason']}" for f in res["failed"])
        raise InvalidValue(f"could not restore {len(res['failed'])} file(s) of batch {res['batch']}, left in the "
                           f"trash: {named}")


@app.command()
def trash(root: Path = ROOT_ARG, catalog: Path | None = CATALOG_OPT, lock_wait: float | None = LOCK_WAIT_OPT):
    """List trash batches (after closing any delete or undo that was killed half-way)."""
    from servelab.dedup.trash import batches, recover

    with _open(root, catalog, lock_wait) as cat:
        fixed = recover(cat)
        if fixed["moved"] or fixed["in_place"] or fixed["restored"]:
            typer.echo(f"recovered an interrupted delete/undo: {fixed['moved']} file(s) confirmed in the trash, "
                       f"{fixed['in_place'] + fixed['restored']} confirmed at their original paths")
        for problem in fixed["conflicts"]:
            typer.echo(f"needs you: {problem}")
        for problem in fixed["bad_lines"]:
            typer.echo(f"warning: {problem}", err=True)
        for b in batches(cat):
            typer.echo(f"{b['batch']}: {len(b['files'])} file(s), {b['in_trash']} still in the trash")
            for f in b["files"]:
                where = {"in_place": "never moved", "restore": "restored"}.get(f["state"], "in trash")
                typer.echo(f"    {where:<11} {f['original']}")


@app.command()
def evaluate(out: Path = typer.Option(Path("results/dedup_eval"), help="output folder"),
             n_base: int = typer.Option(24, help="base photos (each gets its transformed copies)"),
             n_negatives: int = typer.Option(24, help="extra distinct photos with no duplicates"),
             size: int = typer.Option(320, help="long side of the generated photos (pixels)"),
             seed: int = typer.Option(0, help="generator seed"),
             mode: str = typer.Option("local", help="client mode: local | remote | auto"),
             backend: str = typer.Option("fastapi", help="fastapi | triton-http | triton-grpc"),
             url: str | None = typer.Option(None, help="server URL"),
             payload: str = typer.Option("jpeg", help="jpeg | tensor"),
             engine: str | None = typer.Option(None, help="local engine: torch | onnx | onnx-int8")):
    """Measure duplicate-detection quality on a generated labelled set: CSV + Markdown + PR plot."""
    from servelab.client import InferenceClient
    from servelab.dedup.evaluate import evaluate as do_eval

    with InferenceClient(mode=mode, backend=backend, url=url, payload=payload, engine=engine) as client:
        res = do_eval(out, client, n_base=n_base, n_negatives=n_negatives, size=size, seed=seed)
    typer.echo(Path(res["markdown"]).read_text())
    typer.echo(f"wrote {', '.join(res['files'])}")


@app.command("bench-group")
def bench_group(n: int = typer.Option(100_000, help="embeddings"),
                dim: int = typer.Option(512, help="dimensions"),
                threshold: float = typer.Option(0.92, help="cosine threshold"),
                planted: int = typer.Option(1000, help="near-duplicate pairs planted (cosine in [threshold, 1])"),
                method: str = typer.Option("auto", help="auto | exact | lsh"),
                repeats: int = typer.Option(1, help="timed repeats (each in a fresh process)"),
                out: Path = typer.Option(Path("results"), help="folder for the record JSON")):
    """Benchmark grouping random embeddings (time, peak memory, planted-pair recall); writes a record."""
    from servelab.dedup.group_bench import bench_group as run

    rec = run(n=n, dim=dim, threshold=threshold, planted=planted, method=method, repeats=repeats, out=out)
    typer.echo(json.dumps({k: rec[k] for k in ("experiment", "method", "n", "seconds", "peak_rss_mb",
                                               "planted_recall", "targets", "path")}, indent=2))
