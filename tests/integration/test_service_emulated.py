"""The FastAPI service on the emulated accelerator (a real uvicorn on loopback): labelled as emulated, its
micro-batcher pays as in front of a GPU, and it contends for the device with every other process that uses it."""

from __future__ import annotations

import threading
import time

import httpx
import numpy as np
import pytest

from servelab.bench.load import LoadOpts, closed_loop
from servelab.bench.servers import attach
from servelab.config import Settings
from servelab.model.device_profile import profile
from servelab.model.engines import make_embedder
from servelab.service.process import ServiceProcess

pytestmark = pytest.mark.usefixtures("spare_cores")  # ratios of the emulated device's waits

FLAT = profile("flat")  # 168 ms for any batch up to 4 images, then 40 ms per image
OPTS = LoadOpts(min_requests=8, min_p50s=3.0, max_windows=4, tolerance=0.2, max_warmup_s=5.0)  # the device time is exact: a few p50s per window agree


def _service(tmp_path, devices_dir, max_batch: int) -> ServiceProcess:
    env = {"SERVELAB_ENGINE": "emulated", "SERVELAB_DEVICE_PROFILE": "flat", "SERVELAB_DEVICE_DIR": devices_dir,
           "SERVELAB_MAX_BATCH": max_batch, "SERVELAB_MAX_DELAY_MS": 2, "SERVELAB_WARMUP_ITERS": 1}
    return ServiceProcess(env=env, log_path=tmp_path / f"service-max-batch-{max_batch}.log")


def _throughput(url: str, concurrency: int) -> float:
    result = closed_loop(attach("fastapi", url, engine="emulated").worker_factory("tensor", 1), concurrency, OPTS)
    assert result.errors == 0, result.error_examples
    return result.throughput_img_s


def test_the_service_says_its_engine_is_emulated(tmp_path):
    with _service(tmp_path, tmp_path / "devices", 16) as svc:
        info = httpx.get(svc.url + "/info", timeout=10).json()
        assert info["engine"]["engine"] == "emulated" and info["engine"]["device"] == "emulated flat"
        assert info["weights"] == "emulated flat"
        assert info["engine"]["device_profile"]["source"].startswith("a test profile")
        with attach("fastapi", svc.url, engine="emulated").make_client() as client:
            out = client.embed_tensor(np.zeros((2, 3, 224, 224), np.float32))
            assert client.weights == "emulated flat"
        np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)


def test_the_micro_batcher_pays_several_times_on_the_emulated_device(tmp_path):
    figures = {}
    for max_batch in (1, 16):
        with _service(tmp_path, tmp_path / f"devices-{max_batch}", max_batch) as svc:
            figures[max_batch] = _throughput(svc.url, 8)
    print(f"8 clients: max_batch 1 {figures[1]:.1f} img/s, max_batch 16 {figures[16]:.1f} img/s "
          f"({figures[16] / figures[1]:.2f}x)")
    assert figures[16] >= 2.5 * figures[1], figures


def test_the_service_and_another_process_contend_for_one_device(tmp_path):
    """While the service keeps the device full, a batch from this process takes longer than it would alone."""
    devices = tmp_path / "devices"
    engine = make_embedder(Settings.from_env(), engine="emulated", device_profile="flat", device_dir=devices)
    x = np.zeros((4, 3, 224, 224), np.float32)
    with _service(tmp_path, devices, 16) as svc:
        stop = threading.Event()

        def load():
            with attach("fastapi", svc.url, engine="emulated").make_client() as client:
                while not stop.is_set():
                    client.embed_tensor(np.zeros((8, 3, 224, 224), np.float32))

        workers = [threading.Thread(target=load) for _ in range(4)]
        for w in workers:
            w.start()
        time.sleep(1.0)
        t0 = time.perf_counter()
        engine.embed(x)
        shared = time.perf_counter() - t0
        stop.set()
        for w in workers:
            w.join()
    print(f"a batch of 4 beside the loaded service: {shared * 1000:.0f} ms; alone: {FLAT.t_s(4) * 1000:.0f} ms")
    assert shared >= 1.4 * FLAT.t_s(4), f"{shared * 1000:.0f} ms beside the service, {FLAT.t_s(4) * 1000:.0f} alone"


def test_the_service_waits_on_the_emulated_device_instead_of_burning_a_core(tmp_path):
    """The emulated device is a wait, not a computation: while one client keeps it busy, the service process
    sleeps. (Its stand-in vector once went through the BLAS, whose worker thread then spun: a whole core.)"""
    import psutil

    with _service(tmp_path, tmp_path / "devices", 16) as svc:
        proc = psutil.Process(svc.proc.pid)
        with attach("fastapi", svc.url, engine="emulated").make_client() as client:
            x = np.zeros((1, 3, 224, 224), np.float32)
            client.embed_tensor(x)
            t0, c0, calls = time.monotonic(), sum(proc.cpu_times()[:2]), 0
            while time.monotonic() - t0 < 3.0:
                client.embed_tensor(x)
                calls += 1
            cpu_pct = 100 * (sum(proc.cpu_times()[:2]) - c0) / (time.monotonic() - t0)
    assert calls >= 5  # 168 ms per request on the flat profile
    assert cpu_pct < 40, f"the service used {cpu_pct:.0f} % of a core while its engine only waited"
