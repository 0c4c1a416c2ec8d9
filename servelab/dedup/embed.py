"""Embed catalogued photos through an InferenceClient, committing every batch so a rerun resumes.

Only rows that lack an embedding from the client's weights are sent, so an interrupted run loses at most
the batch in flight, and switching weights re-embeds instead of mixing two models in one catalog. A batch
that fails because one file went bad is retried file by file; the bad file keeps its place in MD5 grouping
with `embed_error` saying why (not retried for the same weights), the rest go on. A server that dies, is
not there, or keeps answering 5xx/503 (after the client's bounded retries) stops the run with `EmbedStopped`:
one line saying what was kept and how to finish. Nothing is marked for the batch in flight, so the rerun
embeds every remaining photo exactly once. There is no silent fall-back to the in-process model: its weights
may differ from the server's, and one catalog must not mix two models.
"""

from __future__ import annotations

import queue
import threading
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from servelab.client.errors import InferenceError
from servelab.dedup.catalog import Catalog, OutsideRoot
from servelab.errors import ServelabError
from servelab.model.contract import EMBED_DIM
from servelab.model.device_profile import is_emulated


class EmulatedEngineRefused(ServelabError, ValueError):
    """The client's model is the emulated accelerator, whose vectors are not image embeddings."""


class WorkersNeedAServer(ServelabError, ValueError):
    """Several requests in flight were asked of the in-process engine, which embeds one batch at a time."""


class EmbedStopped(ServelabError, RuntimeError):
    """The model stopped answering mid-run; finished batches are kept and a rerun continues."""


@dataclass
class EmbedReport:
    weights: str
    mode_used: str
    todo: int
    embedded: int
    failed: int
    already: int

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def embed(catalog: str | Path | Catalog, client, batch_size: int = 16, progress: bool = True,
          limit: int | None = None, workers: int = 1) -> EmbedReport:
    """Embed every ok file that has no embedding from `client.weights`; returns counts.

    workers: batches in flight at once, each worker sending on its own connection (`client.another()`): a server
    that gains from concurrent requests (several instances, a batcher that fills across requests) gets them. The
    files are read and the results committed here, batch by batch in order, so a rerun still resumes."""
    from tqdm.auto import tqdm

    weights = client.weights or _probe_weights(client)
    if is_emulated(weights):
        raise EmulatedEngineRefused(
            f"the model answering is the {weights} accelerator: its vectors are stand-ins made from the pixels, "
            "not image embeddings, so grouping by them would find nonsense; embed with engine torch, onnx or "
            "onnx-int8 (or a server running one of them)")
    cat = catalog if isinstance(catalog, Catalog) else Catalog(catalog)
    rows = cat.db.execute(
        "SELECT id, path FROM files WHERE status='ok' AND embed_weights IS NOT ? ORDER BY id", (weights,)).fetchall()
    already = cat.db.execute("SELECT COUNT(*) FROM files WHERE status='ok' AND embed_weights IS ? "
                             "AND embedding IS NOT NULL", (weights,)).fetchone()[0]
    if limit is not None:
        rows = rows[:limit]
    report = EmbedReport(weights=weights, mode_used=client.mode_used, todo=len(rows), embedded=0, failed=0,
                         already=already)
    if workers > 1 and client.mode_used == "local":
        raise WorkersNeedAServer("workers > 1 needs a server: the in-process engine embeds one batch at a time "
                                 "(use workers=1, or --mode remote with a server)")
    bar = tqdm(total=len(rows), unit="img", desc="embedding", disable=not progress)
    senders = [_Inline(client)] if workers <= 1 else [_Worker(client.another) for _ in range(workers)]
    try:
        _embed_rows(cat, client, senders, rows, weights, batch_size, report, bar)
    except InferenceError as exc:  # a dead or failing server: the finished batches are already committed
        left = report.todo - report.embedded - report.failed
        raise EmbedStopped(
            f"embedding stopped: {' '.join(str(exc).split())}; {report.embedded} photos embedded and saved in this "
            f"run ({report.already} before), {left} left: start the server again and rerun `servelab dedup embed` "
            "to finish them") from None
    finally:
        bar.close()
        for sender in senders:
            sender.stop()
        if report.embedded or report.already:  # a run that reached no model must not relabel the catalog
            cat.set_meta("embed_weights", weights)
        if not isinstance(catalog, Catalog):
            cat.close()
    return report


class _Inline:
    """Sends a batch on the caller's own client, in the caller's thread (workers=1)."""

    def __init__(self, client):
        self.client = client

    def send(self, blobs) -> Future:
        done = Future()
        try:
            done.set_result(_embed_batch(self.client, blobs))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller, as a worker thread would
            done.set_exception(exc)
        return done

    def stop(self) -> None:
        pass


class _Worker(threading.Thread):
    """A thread with a client of its own, made and closed in that thread (tritonclient's HTTP client may only be
    used by the thread that made it), sending the batches it is given one at a time."""

    def __init__(self, make_client):
        super().__init__(daemon=True)
        self.make_client, self.tasks = make_client, queue.Queue()
        self.start()

    def run(self) -> None:
        client = None
        try:
            client = self.make_client()
            while (task := self.tasks.get()) is not None:
                blobs, done = task
                try:
                    done.set_result(_embed_batch(client, blobs))
                except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
                    done.set_exception(exc)
        except BaseException as exc:  # noqa: BLE001 - a client that could not be made fails the next batch
            while (task := self.tasks.get()) is not None:
                task[1].set_exception(exc)
        finally:
            if client is not None:
                client.close()

    def send(self, blobs) -> Future:
        done = Future()
        self.tasks.put((blobs, done))
        return done

    def stop(self) -> None:
        self.tasks.put(None)
        self.join(timeout=60)


def _embed_rows(cat: Catalog, client, senders: list, rows, weights: str, batch_size: int, report: EmbedReport,
                bar) -> None:
    """Embed `rows` batch by batch, one transaction per batch in order, with up to one batch in flight per sender;
    bad files are isolated (on `client`, in this thread) and recorded."""
    free, in_flight = list(senders), []  # in_flight: (chunk, ids, blobs, sender, future), oldest first
    for start in range(0, len(rows), batch_size):
        chunk = rows[start:start + batch_size]
        blobs, ids = [], []
        for r in chunk:
            try:
                blobs.append(cat.safe_path(r["path"]).read_bytes())
                ids.append(r["id"])
            except (OSError, OutsideRoot) as exc:
                _fail(cat, r["id"], weights, f"cannot read for embedding: {exc}")
                report.failed += 1
        if not free:
            _finish(cat, client, *in_flight.pop(0), weights, report, bar, free)
        sender = free.pop(0)
        in_flight.append((chunk, ids, blobs, sender, sender.send(blobs)))
    while in_flight:
        _finish(cat, client, *in_flight.pop(0), weights, report, bar, free)


def _finish(cat: Catalog, client, chunk, ids, blobs, sender, future, weights: str, report: EmbedReport, bar,
            free) -> None:
    """Wait for one batch, isolate its bad files if it failed, and commit it; its sender is free again."""
    try:
        vecs = future.result()
    finally:
        free.append(sender)
    if vecs is None:  # isolate the bad file(s)
        vecs = []
        for fid, blob in zip(ids, blobs, strict=False):
            v = _embed_batch(client, [blob], raise_on_error=False)
            if isinstance(v, str):
                _fail(cat, fid, weights, f"embedding failed: {v}")
                report.failed += 1
            else:
                vecs.append((fid, v[0]))
    else:
        vecs = list(zip(ids, vecs, strict=False))
    with cat.db:  # one transaction per batch: a crash loses at most this batch
        cat.db.executemany("UPDATE files SET embedding=?, embed_weights=?, embed_error=NULL WHERE id=?",
                           [(np.asarray(v, dtype=np.float32).tobytes(), weights, fid) for fid, v in vecs])
    report.embedded += len(vecs)
    bar.update(len(chunk))


def _embed_batch(client, blobs, raise_on_error=True):
    if not blobs:
        return np.zeros((0, EMBED_DIM), dtype=np.float32)
    try:
        return client.embed_images(blobs)
    except (InferenceError, ValueError) as exc:
        # A 4xx-style refusal names a bad image; anything else (server down, overloaded, timing out) stops the run.
        status = getattr(exc, "status", None)
        if isinstance(exc, InferenceError) and not (status and 400 <= status < 500 and status not in (408, 429)):
            raise
        return str(exc) if not raise_on_error else None


def _probe_weights(client) -> str:
    """A remote client learns its server's weights label only from a response; ask /info (or stats) first."""
    try:
        label = (client.info() or {}).get("weights") or ""
    except Exception:
        label = ""
    return label or getattr(client, "weights", "") or "unknown (server did not say)"


def _fail(cat: Catalog, file_id: int, weights: str, reason: str) -> None:
    with cat.db:
        cat.db.execute("UPDATE files SET embedding=NULL, embed_weights=?, embed_error=? WHERE id=?",
                       (weights, reason, file_id))
