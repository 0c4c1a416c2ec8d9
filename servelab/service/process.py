"""Run the service as a real uvicorn subprocess on loopback (tests, benchmarks, the lab's local stack)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from servelab.netutil import free_port, port_in_use, wait_http


class ServiceProcess:
    """`with ServiceProcess(env={"SERVELAB_MAX_BATCH": "8"}) as svc: svc.url` — started, ready, then stopped."""

    def __init__(self, port: int | None = None, host: str = "127.0.0.1", env: dict | None = None,
                 log_path: Path | None = None, wait_ready: bool = True, timeout: float = 180.0):
        self.host, self.port = host, port or free_port(host)
        self.env = {k: str(v) for k, v in (env or {}).items()}
        self.log_path = Path(log_path) if log_path else None
        self.wait_ready, self.timeout = wait_ready, timeout
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> ServiceProcess:
        if port_in_use(self.port, self.host):
            raise RuntimeError(f"port {self.port} on {self.host} is already in use; pick another with --port")
        env = {**os.environ, **self.env, "SERVELAB_HOST": self.host, "SERVELAB_PORT": str(self.port)}
        out = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        self.proc = subprocess.Popen([sys.executable, "-m", "servelab.service"], env=env, stdout=out, stderr=subprocess.STDOUT)
        probe = "/readyz" if self.wait_ready else "/healthz"
        if not wait_http(self.url + probe, timeout=self.timeout, proc=self.proc):
            code = self.proc.poll()
            self.stop()
            where = f"; see {self.log_path}" if self.log_path else ""
            raise RuntimeError(f"service on {self.url} did not become ready (exit code {code}){where}")
        return self

    def stop(self, timeout: float = 10.0) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


def wait_until(predicate, timeout: float, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return False
