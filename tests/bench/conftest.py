"""A tiny deterministic Triton model (python backend: OUTPUT0 = 2 × INPUT0 after a fixed sleep) in a temp
repository, served by the Triton engineer's EmbeddedTriton on free loopback ports. Cheap enough to count
every request exactly and to probe open-loop rates without the 2-core machine's CLIP speed mattering."""

from __future__ import annotations

import textwrap
import time

import pytest

TINY = "tiny_double"
DELAY_MS = 20

CONFIG = f"""
name: "{TINY}"
backend: "python"
max_batch_size: 8
input [ {{ name: "INPUT0", data_type: TYPE_FP32, dims: [ 4 ] }} ]
output [ {{ name: "OUTPUT0", data_type: TYPE_FP32, dims: [ 4 ] }} ]
dynamic_batching {{ max_queue_delay_microseconds: 500 }}
instance_group [ {{ kind: KIND_CPU, count: 1 }} ]
parameters {{ key: "delay_ms", value: {{ string_value: "{DELAY_MS}" }} }}
"""

MODEL = textwrap.dedent('''
    import json
    import time

    import numpy as np
    import triton_python_backend_utils as pb_utils


    class TritonPythonModel:
        def initialize(self, args):
            cfg = json.loads(args["model_config"])
            self.delay = float(cfg["parameters"]["delay_ms"]["string_value"]) / 1000.0

        def execute(self, requests):
            time.sleep(self.delay)  # one fixed cost per execution (batch), like a real model
            out = []
            for r in requests:
                x = pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()
                y = (x * 2).astype(np.float32)
                out.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUTPUT0", y)]))
            return out
''')


@pytest.fixture
def run(tmp_path):
    """An empty run folder for one test's records."""
    from servelab.bench.results.records import Run

    return Run(run_id="t", root=tmp_path, weights="random-init (seed 0)")


@pytest.fixture(scope="module")
def tiny_triton(tmp_path_factory):
    from servelab.triton.server import EmbeddedTriton

    repo = tmp_path_factory.mktemp("tiny") / "models"
    (repo / TINY / "1").mkdir(parents=True)
    (repo / TINY / "config.pbtxt").write_text(CONFIG)
    (repo / TINY / "1" / "model.py").write_text(MODEL)
    log = tmp_path_factory.mktemp("tiny-log") / "tritonserver.log"
    with EmbeddedTriton(repo, log_path=log, startup_timeout=180) as srv:
        yield srv


@pytest.fixture
def tiny_factory(tiny_triton):
    """Worker factory: each worker its own InferenceClient (triton-grpc) on the tiny model; checks the answer."""
    import numpy as np

    from servelab.client import InferenceClient

    def make(protocol="grpc"):
        url = tiny_triton.grpc_url if protocol == "grpc" else tiny_triton.http_url

        def factory(i):
            client = InferenceClient(mode="remote", backend=f"triton-{protocol}", url=url, payload="tensor",
                                     model=TINY, input_name="INPUT0", output_name="OUTPUT0")
            x = np.full((1, 4), float(i), dtype=np.float32)

            def work():
                y = client.embed_tensor(x)
                if not np.array_equal(y, x * 2):
                    raise AssertionError(f"wrong answer {y} for {x}")
                return 1
            return work, client.close
        return factory
    return make


@pytest.fixture(scope="session")
def bench_triton(onnx_meta, tmp_path_factory):
    """The real CPU model in the embedded tritonserver, started the way `servelab bench` starts it."""
    from servelab.bench.servers import served

    log = tmp_path_factory.mktemp("bench-triton") / "tritonserver.log"
    with served("triton-http", payload="tensor", log_path=log) as srv:
        yield srv


@pytest.fixture(scope="session")
def bench_service(service):
    """The session's real uvicorn service as a bench handle (built by attach, as the lab builds it)."""
    from servelab.bench.servers import attach

    return attach("fastapi", service.url, payload="tensor", pid=service.proc.pid)


def paced(cost):
    """A work factory whose requests each take `cost()` seconds, paced: a request ends one `cost` after the
    worker's previous one was due, so a late wake-up on a busy machine (several ms have been seen in CI) is
    made up by the next request instead of adding to every one; after a pause (the other side's window in
    an A/B) the schedule restarts from now."""
    def factory(i):
        due = 0.0

        def work():
            nonlocal due
            now, step = time.perf_counter(), cost()
            due = (due if now - due < step else now) + step
            time.sleep(max(0.0, due - time.perf_counter()))
            return 1
        return work
    return factory
