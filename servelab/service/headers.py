"""Request heads within a time bound: a connection whose request line and headers have not all arrived
`timeout_s` after it opened (or after its last answer) is closed.

    uvicorn.Config(app, http=HeaderDeadline)            # the bound from config.header_timeout_s (default 10 s)
    uvicorn.run(app, http=header_deadline(10.0), ...)   # or a class with its own bound

uvicorn bounds the idle time between keep-alive requests, and servelab.service.bodies bounds the body, but nothing
bounds the head itself: a client that sends one header byte every few seconds keeps its connection, and a file
descriptor, forever. The app never sees such a request (it runs once the headers are complete), so this lives in
the HTTP protocol: uvicorn's own httptools protocol with a timer armed when a head is awaited and cancelled when
it is complete. `HeaderDeadline` is a module-level class, so a configuration naming it can be sent to worker
processes (servelab.service.run with several workers).

It also hands a body's chunks to the app without copying them on the way (`on_body`): uvicorn appends every chunk
to a bytearray and copies that into bytes for the app, two copies of every body on the event loop. Reading still
pauses once 64 KiB wait (uvicorn's mark): a higher one let chunks pile up while the app was busy, and joining them
cost more than the event loop's trips it saved.
"""

from __future__ import annotations

import asyncio

from uvicorn.protocols.http.flow_control import HIGH_WATER_LIMIT
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

DEFAULT_TIMEOUT_S = 10.0
BODY_HIGH_WATER = HIGH_WATER_LIMIT  # bytes of a body held per connection before reading pauses (uvicorn's 64 KiB)


class HeaderDeadline(HttpToolsProtocol):
    """uvicorn's httptools protocol, closing a connection whose request head takes longer than `timeout_s` (the
    configuration's `header_timeout_s` where it has one)."""

    timeout_s: float | None = None
    _head_timer: asyncio.TimerHandle | None = None

    def __init__(self, config, *args, **kwargs):
        super().__init__(config, *args, **kwargs)
        if self.timeout_s is None:
            self.timeout_s = getattr(config, "header_timeout_s", DEFAULT_TIMEOUT_S)

    def connection_made(self, transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._await_head()

    def on_headers_complete(self) -> None:
        self._cancel_head_timer()
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        # uvicorn's on_body, but a chunk the app has not yet been handed is kept as the parser's bytes, which the
        # cycle's bytes(body) hands on as they are, instead of copied into a bytearray and out of it again
        if (self.parser.should_upgrade() and self._should_upgrade()) or self.cycle.response_complete:
            return
        held = self.cycle.body
        if not held:
            self.cycle.body = body
        else:  # chunks pile up while the app is busy: they are joined, as uvicorn does
            if isinstance(held, bytes):
                held = self.cycle.body = bytearray(held)
            held += body
        if len(self.cycle.body) > BODY_HIGH_WATER:
            self.flow.pause_reading()
        self.cycle.message_event.set()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._await_head()  # a keep-alive connection: the next head gets the same bound

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_head_timer()
        super().connection_lost(exc)

    def _await_head(self) -> None:
        self._cancel_head_timer()
        self._head_timer = self.loop.call_later(self.timeout_s, self._head_timed_out)

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if not self.transport.is_closing():
            self.transport.close()


def header_deadline(timeout_s: float) -> type[HttpToolsProtocol]:
    """uvicorn's httptools protocol, closing a connection whose request head takes longer than `timeout_s`."""
    return type("HeaderDeadline", (HeaderDeadline,), {"timeout_s": timeout_s})
