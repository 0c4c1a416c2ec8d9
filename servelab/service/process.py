"""Run the service as a real uvicorn subprocess on loopback (tests, benchmarks, the lab's local stack)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from servelab.managed_process import ManagedProcess
from servelab.netutil import free_port


class ServiceProcess(ManagedProcess):
    """`with ServiceProcess(env={"SERVELAB_MAX_BATCH": "8"}) as svc: svc.url` — started, ready, then stopped.

    wait_ready=False returns as soon as /healthz answers (before the engine has warmed up)."""

    name = "service"

    def __init__(self, port: int | None = None, host: str = "127.0.0.1", env: dict | None = None,
                 log_path: Path | None = None, wait_ready: bool = True, timeout: float = 180.0):
        super().__init__(host=host, log_path=log_path, startup_timeout=timeout)
        self.port = port or free_port(host)
        self.env = {k: str(v) for k, v in (env or {}).items()}
        self.wait_ready = wait_ready

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def ready_url(self) -> str:
        return self.url + ("/readyz" if self.wait_ready else "/healthz")

    def command(self) -> list[str]:
        return [sys.executable, "-m", "servelab.service"]

    def environment(self) -> dict:
        env = {**os.environ, **self.env, "SERVELAB_HOST": self.host, "SERVELAB_PORT": str(self.port)}
        if env.get("SERVELAB_PROVIDER", "cpu") != "cpu":
            # a GPU computes: the engine's OpenMP threads sleep when idle instead of spinning on the frontend's cores
            # (read when the OpenMP runtime starts, so it must be in the environment the process starts with)
            env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        return env

    def ports(self) -> dict[str, tuple[int, str]]:
        return {"service": (self.port, "--port")}


def wait_until(predicate, timeout: float, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return False
