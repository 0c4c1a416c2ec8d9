"""Engine instances: a batch alone runs on all cores, overlapping batches each on an instance of their own, and
both ways give the plain engine's embeddings."""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest

from servelab.model.engines import EngineInstances, make_embedder
from servelab.model.preprocess import preprocess_bytes
from tests.conftest import cosine

CORES = len(os.sched_getaffinity(0))


@pytest.fixture(scope="module")
def instances(onnx_meta, settings):
    if CORES < 2:
        pytest.skip("one core: the service runs its engine as one session (nothing to put side by side)")
    engine = make_embedder(settings, engine="onnx", instances=2)
    assert isinstance(engine, EngineInstances) and engine.parallel_runs == 2
    assert engine.threads_each == CORES // 2 and engine.whole.threads == CORES
    return engine


def test_a_batch_alone_runs_on_all_cores_and_overlapping_batches_on_an_instance_each(instances, local_embedder, photos):
    batch = np.stack([preprocess_bytes(p) for p in photos])
    reference = local_embedder.embed(batch)
    before = dict(instances.runs)
    assert cosine(instances.embed(batch), reference).min() >= 0.9999
    assert instances.runs["all_cores"] == before["all_cores"] + 1
    assert not instances.ran_on_an_instance()  # what this thread's last batch did: it had every core

    outs: dict[int, np.ndarray] = {}
    on_instance: dict[int, bool] = {}

    def embed(k: int, rows: slice) -> None:
        outs[k] = instances.embed(batch[rows])
        on_instance[k] = instances.ran_on_an_instance()  # each thread hears how its own batch ran

    first = threading.Thread(target=embed, args=(0, slice(0, 8)))
    first.start()
    time.sleep(0.05)  # the first holds all cores for a few hundred ms: these two wait, then share them
    late = [threading.Thread(target=embed, args=(k, slice(k * 4 - 4, k * 4))) for k in (1, 2)]
    for t in late:
        t.start()
    for t in (first, *late):
        t.join()
    assert instances.runs["one_instance"] >= before["one_instance"] + 2
    assert on_instance == {0: False, 1: True, 2: True}
    assert cosine(outs[0], reference).min() >= 0.9999
    for k in (1, 2):
        assert cosine(outs[k], reference[k * 4 - 4 : k * 4]).min() >= 0.9999  # each caller got its own rows


def test_instances_only_for_an_onnx_engine_left_to_use_every_core(settings, onnx_meta):
    assert not isinstance(make_embedder(settings, engine="onnx", instances=2, threads=1), EngineInstances)
    assert not isinstance(make_embedder(settings, engine="onnx", instances=1), EngineInstances)


def test_a_cpu_session_takes_as_many_threads_as_the_cores_this_process_may_use(settings, onnx_meta):
    """ONNX Runtime's own default counts the machine's cores, not the process's CPU affinity (a container's
    cpuset, `taskset`): on one allowed core it would still start a thread per machine core to take turns on it."""
    if CORES < 2:
        pytest.skip("one core: the affinity cannot be narrowed")
    allowed = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(allowed)})
    try:
        before = len(os.listdir("/proc/self/task"))
        engine = make_embedder(settings, engine="onnx", instances=2)
        started = len(os.listdir("/proc/self/task")) - before
    finally:
        os.sched_setaffinity(0, allowed)
    assert not isinstance(engine, EngineInstances)  # one core: nothing to put side by side
    assert engine.threads == 1
    assert started == 0, f"the session started {started} thread(s) of its own on one allowed core"
