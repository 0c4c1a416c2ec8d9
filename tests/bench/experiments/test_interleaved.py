"""Interleaving two configurations of one Triton model: `ab(prepare=…)` with `config_switch`, on a real
tritonserver (the tiny model: 20 ms per execution whatever the batch, so batching on vs off is a large,
certain difference)."""

from __future__ import annotations

import pytest

from servelab.bench.experiments import Side, ab
from servelab.bench.load import LoadOpts
from servelab.bench.results.records import Run
from servelab.bench.servers import TritonServed
from servelab.triton.control import config_dict, config_switch, get_config

from ..conftest import TINY

pytestmark = pytest.mark.triton


def test_batching_on_and_off_interleave_on_one_model_and_the_config_comes_back(tiny_triton, tiny_factory, tmp_path):
    on = config_dict(get_config(tiny_triton.http_url, TINY))
    off = {k: v for k, v in on.items() if k != "dynamic_batching"}
    srv = TritonServed(server="triton-grpc", engine="tiny", url=tiny_triton.http_url, protocol="grpc", http_url=tiny_triton.http_url,
                       model=TINY, jpeg_model=TINY)
    srv.worker_factory = lambda payload, batch: tiny_factory()  # the tiny model's own inputs
    loaded: list[int] = []
    seen: list[tuple[int, bool]] = []

    with config_switch(tiny_triton.http_url, TINY, [on, off]) as use:
        def prepare(side: int) -> bool:
            changed = use(side)
            if changed:
                loaded.append(side)
            seen.append((side, "dynamic_batching" in get_config(tiny_triton.http_url, TINY)))
            return changed

        opts = LoadOpts(min_requests=16, min_p50s=2, max_windows=3, tolerance=0.5, max_warmup_s=5)
        a, b, r = ab(Run("t", root=tmp_path, weights="none"), "t-batching", Side("batching on", srv, concurrency=8),
                     Side("batching off", srv, concurrency=8), opts=opts, prepare=prepare)

    # every window of each side ran on that side's config; A and B alternated (ABBA), so the model was
    # reloaded at most once per window, not per request
    assert seen and all(batching == (side == 0) for side, batching in seen)
    assert {0, 1} <= set(loaded) and len(loaded) < len(seen)  # reloaded on a change of side only
    assert loaded[0] == 1  # the model's own config (A) counted as loaded: the first reload was B's
    assert [side for side, _ in seen[:3]] == [0, 0, 1]  # B's config loaded for B's first window, not before A's
    assert a["server_stats"]["avg_batch"] > 1.5          # dynamic batching gathered the 8 clients' requests
    assert b["server_stats"]["avg_batch"] == pytest.approx(1.0)  # without it, one request per execution
    assert r["kind"] == "ab" and r["ratio"] > 2.0        # 20 ms per execution: batching multiplies throughput
    assert r["protocol"] == "grpc" and r["payload"] == "tensor"
    assert a["params"]["side"] == "a" and b["params"]["side"] == "b"
    assert "dynamic_batching" in get_config(tiny_triton.http_url, TINY)  # restored on leaving the block
