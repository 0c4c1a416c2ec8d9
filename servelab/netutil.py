"""Loopback ports and readiness polling, shared by every server servelab starts (and the tests)."""

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


def wait_http(url: str, timeout: float = 60.0, ok=(200,), proc=None, give_up=None) -> bool:
    """Poll `url` until it answers with one of `ok`; False on timeout, when `proc` exits first, or as soon as
    `give_up()` is true (e.g. the server's log already says why it will never be ready)."""
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            return False
        if give_up is not None and give_up():
            return False
        try:
            if httpx.get(url, timeout=1.0).status_code in ok:
                return True
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    return False
