"""The review UI answers only to its own address, and never inside another site's frame.

    app.add_middleware(HostCheck, names=allowed_names("127.0.0.1", 8000), port=8000)

A web page on another site can point its own domain at 127.0.0.1 (DNS rebinding) and then read the UI as if
it were same-origin, form token included; the browser still sends that domain in `Host`, so a request whose
`Host` is not one of the UI's own names (with its port) is refused with 421 and a JSON body saying which
address to open. Every response also forbids framing (`frame-ancestors 'none'`, `X-Frame-Options: DENY`), so
a page cannot overlay the Delete buttons with its own (clickjacking). Starlette's TrustedHostMiddleware
ignores the port and answers in plain text, hence this small one.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
from collections.abc import Iterable

from starlette.datastructures import Headers, MutableHeaders
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
WILDCARDS = ("0.0.0.0", "::", "")
FRAME_HEADERS = {"Content-Security-Policy": "frame-ancestors 'none'", "X-Frame-Options": "DENY"}


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _as_host(name: str) -> str:
    """A name as it appears in a Host header: IPv6 addresses in brackets, lower case."""
    name = name.strip().lower()
    with contextlib.suppress(ValueError):
        if ipaddress.ip_address(name.strip("[]")).version == 6:
            return f"[{name.strip('[]')}]"
    return name


def allowed_names(host: str, extra: Iterable[str] = ()) -> list[str]:
    """The names the UI answers to when bound to `host`: the loopback names, the bound address itself, for a
    wildcard bind this machine's host names and addresses, and any `extra` names (a DNS alias, a tunnel)."""
    names = list(LOOPBACK_NAMES)
    if host in WILDCARDS:
        with contextlib.suppress(OSError):
            hostname = socket.gethostname()
            names += [hostname, socket.getfqdn(hostname)]
            names += socket.gethostbyname_ex(hostname)[2]
    else:
        names.append(host)
    names += list(extra)
    return list(dict.fromkeys(_as_host(n) for n in names if n))


class HostCheck:
    """Refuse requests whose Host is not one of `names` at `port`; add the no-framing headers to the rest."""

    def __init__(self, app: ASGIApp, names: Iterable[str], port: int) -> None:
        self.app, self.port = app, port
        self.names = list(names)
        self.allowed = {f"{n}:{port}" for n in self.names} | (set(self.names) if port == 80 else set())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return

        async def send_with_frame_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for key, value in FRAME_HEADERS.items():
                    headers[key] = value
            await send(message)

        host = Headers(scope=scope).get("host", "").lower()
        if host not in self.allowed:
            where = f"http://{self.names[0]}:{self.port}/"
            response = JSONResponse({"error": f"this is the photo finder's review UI, and it does not answer to "
                                              f"host {host or '(none)'!r}; open {where} instead (or start it with "
                                              f"--allowed-host NAME)"}, status_code=421)
            await response(scope, receive, send_with_frame_headers)
            return
        await self.app(scope, receive, send_with_frame_headers)
