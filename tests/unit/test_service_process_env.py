"""The service's child environment: where a GPU computes, the engine's OpenMP threads sleep when idle instead of
spinning on the cores the frontend needs; on a CPU, where they compute, nothing is changed."""

from __future__ import annotations

from servelab.service.process import ServiceProcess


def test_a_gpu_service_gets_passive_openmp_threads_and_a_cpu_one_keeps_the_default(monkeypatch):
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.delenv("SERVELAB_PROVIDER", raising=False)
    assert "OMP_WAIT_POLICY" not in ServiceProcess(port=1).environment()
    assert ServiceProcess(port=1, env={"SERVELAB_PROVIDER": "cuda"}).environment()["OMP_WAIT_POLICY"] == "PASSIVE"
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")  # the user's own choice stands
    assert ServiceProcess(port=1, env={"SERVELAB_PROVIDER": "cuda"}).environment()["OMP_WAIT_POLICY"] == "ACTIVE"
