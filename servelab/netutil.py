"""Loopback port helpers shared by the service, Triton and review-UI lifecycles and the tests."""

from __future__ import annotations

import socket
import time


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
        return False


def wait_http(url: str, timeout: float = 60.0, ok=(200,), proc=None) -> bool:
    """Poll `url` until it answers with one of `ok`; False on timeout or when `proc` exits first."""
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            return False
        try:
            if httpx.get(url, timeout=1.0).status_code in ok:
                return True
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    return False
