"""Several frontend processes on one port (SERVELAB_WORKERS, or WEB_CONCURRENCY as platforms set it): a real
uvicorn supervisor and its workers on loopback, each with its own engine (the emulated device, so no model loads)."""

from __future__ import annotations

import httpx
import numpy as np
import psutil
import pytest

from servelab.config import Settings
from servelab.fingerprint import usable_cores
from servelab.service.launch import per_worker
from servelab.service.process import ServiceProcess, wait_until

TENSOR = np.zeros((1, 3, 224, 224), np.float32).tobytes()
HEADERS = {"Content-Type": "application/octet-stream", "X-Shape": "1,3,224,224"}


def _workers(pid: int) -> list[psutil.Process]:
    return [p for p in psutil.Process(pid).children() if "multiprocessing" in " ".join(p.cmdline())
            and "resource_tracker" not in " ".join(p.cmdline())]


@pytest.mark.parametrize("variable", ["SERVELAB_WORKERS", "WEB_CONCURRENCY"])
def test_two_workers_start_and_every_one_that_answers_serves(variable, tmp_path):
    env = {"SERVELAB_ENGINE": "emulated", "SERVELAB_DEVICE_PROFILE": "linear", "SERVELAB_WARMUP_ITERS": "1",
           "SERVELAB_DEVICE_DIR": str(tmp_path / "devices"), variable: "2"}
    with ServiceProcess(env=env, log_path=tmp_path / "service.log") as svc:
        workers = _workers(svc.pid)
        assert len(workers) == 2, svc.log_since()
        ready: set[int] = set()

        def both_ready() -> bool:  # a fresh connection each time: the kernel hands it to either worker
            info = httpx.get(svc.url + "/info", timeout=10).json()
            assert info["process"]["workers"] == 2
            if info["ready"]:
                ready.add(info["process"]["pid"])
            return len(ready) == 2

        assert wait_until(both_ready, timeout=60), f"ready: {ready}"
        assert ready == {w.pid for w in workers}
        answers = [httpx.post(svc.url + "/embed/tensor", content=TENSOR, headers=HEADERS, timeout=30)
                   for _ in range(8)]
        assert [r.status_code for r in answers] == [200] * 8, [r.text for r in answers]
        assert all(r.headers["x-servelab-engine"] == "emulated" for r in answers)
    assert not any(w.is_running() and w.status() != psutil.STATUS_ZOMBIE for w in workers)


def test_workers_come_from_web_concurrency_unless_servelab_workers_says(monkeypatch):
    monkeypatch.setenv("WEB_CONCURRENCY", "3")
    assert Settings.from_env().workers == 3
    monkeypatch.setenv("SERVELAB_WORKERS", "2")
    assert Settings.from_env().workers == 2
    monkeypatch.setenv("SERVELAB_WORKERS", "0")
    with pytest.raises(ValueError, match="workers must be >= 1"):
        Settings.from_env()


def test_each_worker_engine_gets_its_share_of_the_cores():
    one = Settings(workers=1)
    assert per_worker(one) is one
    split = per_worker(Settings(workers=2))
    assert split.threads == max(1, usable_cores() // 2) and split.engine_instances == 1
    assert per_worker(Settings(workers=2, threads=3)).threads == 3  # an explicit thread count is kept


def _samples(text: str) -> list:
    from prometheus_client.parser import text_string_to_metric_families

    return [s for family in text_string_to_metric_families(text) for s in family.samples]


def _value(samples, name: str, **labels) -> float:
    return sum(s.value for s in samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))


def test_one_scrape_of_two_workers_counts_the_requests_both_answered(tmp_path):
    """Every /metrics answer, from whichever worker, counts what both workers served: the /info requests each of
    them answered (their pids say which), and the tensors sent; the gauges are one series per worker."""
    env = {"SERVELAB_ENGINE": "emulated", "SERVELAB_DEVICE_PROFILE": "linear", "SERVELAB_WARMUP_ITERS": "1",
           "SERVELAB_DEVICE_DIR": str(tmp_path / "devices"), "SERVELAB_METRICS_DIR": str(tmp_path / "metrics"),
           "SERVELAB_WORKERS": "2"}
    with ServiceProcess(env=env, log_path=tmp_path / "service.log") as svc:
        pids = {w.pid for w in _workers(svc.pid)}
        answered: dict[int, int] = {}

        def both_answered() -> bool:  # a fresh connection each time: the kernel hands it to either worker
            info = httpx.get(svc.url + "/info", timeout=10).json()
            answered[info["process"]["pid"]] = answered.get(info["process"]["pid"], 0) + 1
            return len(answered) == 2 and info["ready"]

        assert wait_until(both_answered, timeout=60), f"answered: {answered}"
        assert set(answered) == pids and len(pids) == 2
        tensors = [httpx.post(svc.url + "/embed/tensor", content=TENSOR, headers=HEADERS, timeout=30)
                   for _ in range(6)]
        assert [r.status_code for r in tensors] == [200] * 6, [r.text for r in tensors]

        def counted() -> bool:  # a count lands once its answer is sent: a scrape may come just before it
            samples = _samples(httpx.get(svc.url + "/metrics", timeout=10).text)
            return (_value(samples, "servelab_requests_total", endpoint="/info", status="200") == sum(answered.values())
                    and _value(samples, "servelab_requests_total", endpoint="/embed/tensor", status="200") == 6)

        assert wait_until(counted, timeout=20), httpx.get(svc.url + "/metrics", timeout=10).text
        for _ in range(6):  # whichever worker answers the scrape
            samples = _samples(httpx.get(svc.url + "/metrics", timeout=10).text)
            assert _value(samples, "servelab_images_total") >= 6  # the warm-ups' images and the tensors'
            assert _value(samples, "servelab_requests_total", endpoint="/embed/tensor", status="200") == 6
            gauges = {int(s.labels["pid"]) for s in samples if s.name == "servelab_in_flight"}
            assert gauges == pids  # one series per worker: its own gate's requests in flight
        run_folders = list((tmp_path / "metrics").iterdir())
        assert [f.name for f in run_folders] == [f"run-{svc.pid}"]  # the run's own folder, named by its supervisor
    assert list((tmp_path / "metrics").iterdir()) == []  # removed when the run ends
