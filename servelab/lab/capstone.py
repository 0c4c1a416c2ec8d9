"""Notebook 09's job: the serving choices read from this run's own records, the choice served, the photo job timed
stage by stage, and the job's embedding pace against a baseline in alternating rounds.

    choice = choose(step.run.records, max_queue=Settings.from_env().max_queue)  # server, protocol, batch, workers, engine
    with serving(choice, lab, logs) as client:        # an InferenceClient for the choice (an int8 server if chosen)
        job = timed_job(folder, catalog, client, choice)                # scan, embed, group: seconds each
        pace = pace_ab(step.run, "09-choice-vs-baseline", {"your choice": (client, b, w), "baseline": (…, 1, 1)}, …)
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from servelab.bench.report import apart_reading, ratio_reading, ratio_sentence
from servelab.lab import rounds
from servelab.vocabulary import Engine


@dataclass(frozen=True)
class Pick:
    """One serving choice and the record it rests on, in words."""

    value: object
    because: str


@dataclass(frozen=True)
class Choice:
    server: Pick    # "fastapi" | "triton"
    protocol: Pick  # "http" | "grpc"
    batch: Pick     # photos a request
    workers: Pick   # requests in flight at once
    engine: Pick    # "onnx" (fp32) | "onnx-int8"

    @property
    def backend(self) -> str:
        return "fastapi" if self.server.value == "fastapi" else f"triton-{self.protocol.value}"

    def rows(self) -> list[dict]:
        return [{"choice": name, "value": pick.value, "because": pick.because}
                for name, pick in (("server", self.server), ("protocol", self.protocol), ("batch", self.batch),
                                   ("requests in flight", self.workers), ("engine", self.engine))]

    def describe(self) -> str:
        return (f"{self.backend}, {self.engine.value}, batches of {self.batch.value}, {self.workers.value} request(s) "
                "in flight")


def _last(records: list[dict], **match) -> dict | None:
    found = [r for r in records if all(r.get(k) == v for k, v in match.items())]
    return found[-1] if found else None


def _side(records: list[dict], experiment: str, side: str) -> dict | None:
    found = [r for r in records if r.get("experiment") == experiment and r.get("kind") == "load"
             and (r.get("params") or {}).get("side") == side]
    return found[-1] if found else None


def _ahead(rec: dict) -> str | None:
    """The label of the side this run ranks ahead in an A/B record, None when it ranks neither."""
    v = ratio_reading(rec)
    return v.side(rec.get("a"), rec.get("b")) if v.ranked else None


def pick_server(records: list[dict]) -> Pick:
    rec = _last(records, kind="ab", experiment="06a-servelab-vs-triton")
    if rec is None:
        return Pick("fastapi", "no FastAPI-vs-Triton comparison in this run's records (06a): the simpler stack")
    ahead = str(_ahead(rec) or "")
    triton = ahead.startswith("triton")
    return Pick("triton" if triton else "fastapi",
                f"06a, JPEG requests at {rec.get('concurrency')} clients: {ratio_sentence(rec)}"
                + ("" if ahead else "; neither ranked ahead, so the simpler stack"))


def pick_protocol(records: list[dict], server: str) -> Pick:
    if server == "fastapi":
        return Pick("http", "the service speaks HTTP")
    recs = [r for r in records if r.get("kind") == "ab" and r.get("experiment") == "07-protocol-batch"]
    if not recs:
        return Pick("http", "no gRPC-vs-HTTP comparison in this run's records (07): HTTP, Triton's default")
    rec = max(recs, key=lambda r: r.get("batch") or 0)  # the finder sends batches: the largest batch measured
    grpc = _ahead(rec) == "grpc"
    return Pick("grpc" if grpc else "http", f"07, batches of {rec.get('batch')}: {ratio_sentence(rec)}"
                + ("" if grpc else "; gRPC not clearly ahead, so HTTP"))


def pick_batch(records: list[dict], *, drift: float | None = None) -> Pick:
    points = [r for r in records if r.get("kind") == "load" and r.get("experiment") == "04-triton-batch"]
    if len({r.get("batch") for r in points}) < 2:
        return Pick(16, "no batch sweep in this run's records (04): the finder's default of 16")
    small = min(points, key=lambda r: r["batch"])
    big = max(points, key=lambda r: r["batch"])
    v = apart_reading(big, small, drift=drift)
    gains = v.ranked and v.ahead == "a"
    return Pick(int(big["batch"]) if gains else 1,
                f"04, one client: batch {big['batch']} {big['throughput_img_s']:.1f} img/s against batch "
                f"{small['batch']} {small['throughput_img_s']:.1f} img/s, "
                + ("ranked ahead" if gains else "not ranked ahead, so one photo a request"))


def pick_workers(records: list[dict], batch: int, max_queue: int | None = None) -> Pick:
    rec = _last(records, kind="ab", experiment="04-triton-concurrency-ratio")
    side = _side(records, "04-triton-concurrency-ratio", "a")
    if rec is None or side is None:
        return Pick(1, "no concurrency comparison in this run's records (04): one request at a time")
    ahead = _ahead(rec) == rec.get("a")
    n = int(side["concurrency"]) if ahead else 1
    because = f"04, batch-1 requests: {ratio_sentence(rec)}" + ("" if ahead else "; not ranked ahead, so one at a time")
    if max_queue and n * batch > max_queue:  # more images in flight than the service queues would be refused (503)
        n = max(1, max_queue // batch)
        because += f"; {n} so that {n} × {batch} photos stay within the service's queue of {max_queue}"
    return Pick(n, because)


def pick_engine(records: list[dict], server: str) -> Pick:
    experiment = "05a-deploy-service" if server == "fastapi" else "05a-deploy-triton"
    rec, side = _last(records, kind="ab", experiment=experiment), _side(records, experiment, "a")
    if rec is None or side is None:
        return Pick(str(Engine.ONNX), "05a deployed no other engine in this run: the stack's fp32 graph")
    won = _ahead(rec) == rec.get("a")
    return Pick(str(side["engine"]) if won else str(Engine.ONNX), f"05a, served: {ratio_sentence(rec)}"
                + ("" if won else "; not ranked ahead, so the stack's fp32 graph"))


def choose(records: list[dict], *, max_queue: int | None = None, drift: float | None = None) -> Choice:
    """The choices this run's records support: each one that a comparison ranked, else the simpler default."""
    server = pick_server(records)
    batch = pick_batch(records, drift=drift)
    return Choice(server, pick_protocol(records, server.value), batch,
                  pick_workers(records, int(batch.value), max_queue if server.value == "fastapi" else None),
                  pick_engine(records, server.value))


@contextlib.contextmanager
def serving(choice: Choice, lab, log_dir: Path) -> Iterator:
    """An InferenceClient (JPEG payload) for `choice`: the lab's own servers, or, for an engine they do not run,
    a service started with it beside the lab's (same settings) or the lab's Triton encoder pointed at the int8
    graph (its own config loaded back on exit)."""
    from servelab.client import InferenceClient
    from servelab.config import Settings

    engine = choice.engine.value
    if choice.server.value == "fastapi":
        if engine == Engine.ONNX:
            with InferenceClient(mode="remote", backend="fastapi", url=lab.service_url, payload="jpeg") as client:
                yield client
            return
        from servelab.bench.servers import served
        from servelab.lab.winner import service_settings

        with served("fastapi", engine, log_path=Path(log_dir) / "09-service.log",
                    **service_settings(Settings.from_env())) as svc, \
                InferenceClient(mode="remote", backend="fastapi", url=svc.url, payload="jpeg") as client:
            yield client
        return
    url = lab.triton_http_url if choice.protocol.value == "http" else lab.triton_grpc_url
    options = {"model": lab.triton_model, "jpeg_model": lab.triton_jpeg_model}
    switch = contextlib.nullcontext()
    if engine != Engine.ONNX:
        from servelab.lab.winner import graph_switch
        from servelab.model.export import ensure_exported

        switch = graph_switch(lab.triton_http_url, lab.triton_model, ensure_exported(Settings.from_env())["int8"]["path"])
    with switch as use:
        if use is not None:
            use(0)  # the int8 graph
        with InferenceClient(mode="remote", backend=choice.backend, url=url, payload="jpeg", **options) as client:
            yield client


def timed_job(folder: Path, catalog: Path, client, *, batch: int, workers: int) -> dict:
    """The finder's three stages on `folder`, each timed: scan (read, MD5, pHash, catalog), embed (through
    `client`), group (by the default rule for the weights that embedded it)."""
    from servelab.dedup import embed, group, scan

    t0 = time.perf_counter()
    scan(folder, catalog)
    t1 = time.perf_counter()
    report = embed(catalog, client, batch_size=batch, progress=False, workers=workers)
    t2 = time.perf_counter()
    groups = group(catalog)
    t3 = time.perf_counter()
    return {"scan_s": t1 - t0, "embed_s": t2 - t1, "group_s": t3 - t2, "total_s": t3 - t0, "report": report,
            "groups": groups}


def sample_slices(files: list[Path], root: Path, *, slices: int, per_slice: int) -> list[Path]:
    """`slices` folders of `per_slice` photos each under `root`, spread over `files` (hard links where the file
    system allows, copies otherwise), each scanned into its own catalog there."""
    from servelab.dedup import scan

    step = max(1, len(files) // max(1, slices * per_slice))
    picked = files[::step][:slices * per_slice]
    out = []
    for k in range(slices):
        folder = root / f"slice_{k}"
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        for n, src in enumerate(picked[k * per_slice:(k + 1) * per_slice]):
            dst = folder / f"{n:04d}{src.suffix}"
            try:
                os.link(src, dst)
            except OSError:
                shutil.copyfile(src, dst)
        scan(folder, root / f"slice_{k}.sqlite")
        out.append(folder)
    return out


def pace_ab(run, experiment: str, sides: dict[str, tuple], slices: list[Path], *, quick: bool = False) -> dict:
    """Each side — label: (client, batch, workers) — embeds every slice with the finder's own `embed` (reading the
    files, committing to a copy of the slice's catalog), the two sides back to back per slice, the order reversed
    every other slice; returns the `ab` record of their paces (photos a second), first side ÷ second."""
    from servelab.dedup import embed

    labels, paces = list(sides), {label: [] for label in sides}
    for k, folder in enumerate(slices):
        for label in rounds.order(labels, k):
            client, batch, workers = sides[label]
            catalog = folder.with_name(f"{folder.name}-{labels.index(label)}.sqlite")
            shutil.copyfile(folder.with_suffix(".sqlite"), catalog)
            t0 = time.perf_counter()
            done = embed(catalog, client, batch_size=batch, progress=False, workers=workers).embedded
            paces[label].append(done / (time.perf_counter() - t0))
    a, b = labels
    return rounds.ratio_record(run, experiment, a, b, paces[a], paces[b], quick=quick, payload="jpeg",
                               params={"paces_img_s": paces, "photos_per_slice": len(list(slices[0].iterdir())),
                                       "served_by": "; ".join(f"{label}: {_served_by(client)}"
                                                              for label, (client, _b, _w) in sides.items())},
                               note="photos a second A ÷ B, the finder's embed step on the same slices of the job's "
                                    "folder, back to back; min–max over the slices")


def _served_by(client) -> str:
    """Which machine answered a finder's client: this one for the in-process engine, the machine a service's /info
    reports about itself, or the Triton at the client's address (Triton names no host)."""
    from servelab.bench.servers.handle import this_machine
    from servelab.bench.servers.triton_served import triton_machine
    from servelab.fingerprint import machine_label

    info = client.info()
    if info.get("mode_used") == "local":
        return this_machine()
    if isinstance(info.get("machine"), dict):
        return machine_label(info["machine"])
    return triton_machine(str(info.get("url") or "").split("://")[-1], None)
