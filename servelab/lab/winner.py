"""Deploying what notebook 05a measured best: which engine won, the settings a second service runs it with so that
it compares like for like with the lab's own, Triton's encoder config running another ONNX file, and how far the
served embeddings moved from fp32's.

    won = winner(vnni_flags(), int8_rec)                  # Winner("onnx-int8", "this CPU has VNNI: avx512_vnni")
    with served("fastapi", won.engine, **service_settings(settings)) as svc: ab(run, …, Side(…, svc), …)
    with graph_switch(triton_http_url, model, int8_path) as use:   # use(0): the int8 graph, use(1): its own
        ab(run, …, Side(…), Side(…), prepare=use)
    drift_record(run, "05a-deploy-drift", "fastapi", won.engine, served_int8, served_fp32)
    beside_in_process(service_ab[-1], int8_rec)           # "smaller than": the served lead against section 0's
    served_gain(run, lab, won, triton, int8_path, photos, concurrency=8, opts=opts, settings=settings)  # all of it
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np

from servelab.bench.report import band, has_band, ratio_reading
from servelab.errors import InvalidValue
from servelab.model.export import cosine_rows
from servelab.vocabulary import Engine


@dataclass(frozen=True)
class Winner:
    """The engine to deploy and why it won, in words a sentence can carry."""

    engine: str
    why: str

    @property
    def deploys(self) -> bool:
        """Whether it differs from the fp32 graph the lab's stack already serves."""
        return self.engine != Engine.ONNX


def winner(vnni: list[str], int8_vs_fp32: dict) -> Winner:
    """int8 where the CPU has VNNI (its 8-bit products run on multiply-add instructions made for them) or where this
    run ranked int8 ahead of fp32 (`int8_vs_fp32`: a ratio record int8 ÷ fp32); otherwise the fp32 graph."""
    if vnni:
        return Winner(Engine.ONNX_INT8, f"this CPU has VNNI: {', '.join(vnni)}")
    reading = ratio_reading(int8_vs_fp32)
    if reading.ranked and reading.ahead == "a":
        return Winner(Engine.ONNX_INT8, "int8 was ranked ahead of fp32 in this run, although the CPU has no VNNI")
    return Winner(Engine.ONNX, "this CPU has no VNNI and this run did not rank int8 ahead of fp32")


def service_settings(settings) -> dict:
    """The lab service's batching, queue and thread settings, as `served("fastapi", …)` takes them: a second
    service started with them differs from the lab's own in its engine only."""
    return {"max_batch": settings.max_batch, "max_delay_ms": settings.max_delay_ms, "max_queue": settings.max_queue,
            "threads": settings.threads}


def graph_config(http_url: str, model: str, onnx_path: str | Path) -> dict:
    """The config `model` has on the Triton at `http_url`, running the ONNX file `onnx_path` instead of its own (the
    CPU encoder's `onnx_file` parameter, which an absolute path overrides): a config override to load with
    `servelab.triton.control.config_switch`. Nothing is loaded here."""
    from servelab.triton.control import config_dict, get_config

    config = copy.deepcopy(config_dict(get_config(http_url, model)))
    params = config.get("parameters") or {}
    if "onnx_file" not in params:
        raise InvalidValue(f"Triton model {model!r} names no onnx_file parameter, so it cannot be pointed at another "
                           "graph: deploy to the CPU encoder of `servelab triton stage cpu`")
    path = Path(onnx_path).resolve()
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such ONNX file; run `servelab export` to write the int8 graph")
    params["onnx_file"] = {"string_value": str(path)}
    return config


@contextlib.contextmanager
def graph_switch(http_url: str, model: str, onnx_path: str | Path) -> Iterator[Callable[[int], bool]]:
    """`use(i)` loads `model` running `onnx_path` (0) or with its own config (1) unless that one is loaded, for the
    `prepare` of an alternating-window comparison; the model's own config is loaded again on exit."""
    from servelab.triton.control import config_dict, config_switch, get_config

    configs = [graph_config(http_url, model, onnx_path), config_dict(get_config(http_url, model))]
    with config_switch(http_url, model, configs) as use:
        yield use


def drift_record(run, experiment: str, server: str, engine: str, served: np.ndarray, fp32: np.ndarray) -> dict:
    """Record how far `engine`'s embeddings served by `server` moved from fp32's for the same photos (rows of
    `served` and `fp32`): the lowest cosine as `value`, the mean in `value_mean` and the largest 1 − cosine, so a
    cosine that prints as 1.000000 still shows how far from 1 it is."""
    cos = cosine_rows(np.asarray(served, np.float64), np.asarray(fp32, np.float64))
    return run.record(experiment, kind="derived", server=server, engine=engine, batch=len(cos),
                      value=float(cos.min()), value_mean=float(cos.mean()), one_minus_cosine_max=float(1 - cos.min()),
                      note=f"cosine of {engine} vs fp32 embeddings served by {server}, {len(cos)} lab photos "
                           "(min; mean in value_mean)")


def beside_in_process(served: dict, in_process: dict) -> str:
    """How a served ratio (its window pairs) stands against the in-process one (its rounds): "smaller than" or
    "larger than" only when the two ranges are apart, else "within the range of": the ranges, not the medians,
    say whether serving changed the lead; "not to be ranked against" when either has no spread (one pair, one
    round)."""
    if not (has_band(served, "ratio") and has_band(in_process, "ratio")):
        return "not to be ranked against"
    _, s_lo, s_hi = band(served, "ratio")
    _, i_lo, i_hi = band(in_process, "ratio")
    return "smaller than" if s_hi < i_lo else "larger than" if s_lo > i_hi else "within the range of"


class Served(NamedTuple):
    """The winner served, each against fp32 in alternating windows (`ab` records: [A, B, A ÷ B]), and how far it
    moved the same photos' embeddings (drift records: the service's, then Triton's)."""

    service_ab: list[dict]
    triton_ab: list[dict]
    drift: list[dict]


def served_gain(run, lab, won: Winner, triton, onnx_path: str | Path, photos: list[bytes], *, concurrency: int, opts,
                settings, log_path: Path | None = None) -> Served:
    """`won` served two ways, each measured against the fp32 the lab serves: a second FastAPI service on a free port
    with the lab service's settings (`service_settings`), and the lab's Triton encoder pointed at `onnx_path`
    (`graph_switch`: its own config is back afterwards); both embed `photos` on each side for the drift."""
    import dataclasses

    from servelab.bench.experiments import Side, ab
    from servelab.bench.servers import served
    from servelab.client import InferenceClient

    def embed(backend, url, **options):  # the photos, as this server embeds them
        with InferenceClient(mode="remote", backend=backend, url=url, payload="tensor", **options) as client:
            return client.embed_images(photos)

    fp32_service = lab.attach("fastapi")
    with served("fastapi", won.engine, log_path=log_path, **service_settings(settings)) as service:
        service_ab = ab(run, "05a-deploy-service", Side(f"{won.engine} service", service, concurrency=concurrency),
                        Side(f"{fp32_service.engine} service", fp32_service, concurrency=concurrency), opts=opts)
        drift = [drift_record(run, "05a-deploy-drift", "fastapi", won.engine, embed("fastapi", service.url),
                              embed("fastapi", lab.service_url))]
    with graph_switch(lab.triton_http_url, lab.triton_model, onnx_path) as use:  # 0: the winner's graph, 1: its own
        triton_ab = ab(run, "05a-deploy-triton",
                       Side(f"{won.engine} Triton", dataclasses.replace(triton, engine=won.engine), concurrency=concurrency),
                       Side(f"{triton.engine} Triton", triton, concurrency=concurrency), opts=opts, prepare=use)
        embedded = []
        for side in (0, 1):  # the winner's graph, then the model's own
            use(side)
            embedded.append(embed("triton-http", lab.triton_http_url, model=lab.triton_model))
    drift.append(drift_record(run, "05a-deploy-drift", "triton-http", won.engine, *embedded))
    return Served(service_ab, triton_ab, drift)
