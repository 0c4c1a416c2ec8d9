"""Request heads within a time bound: a connection whose request line and headers have not all arrived
`timeout_s` after it opened (or after its last answer) is closed.

    uvicorn.run(app, http=header_deadline(10.0), ...)

uvicorn bounds the idle time between keep-alive requests, and servelab.service.bodies bounds the body, but nothing
bounds the head itself: a client that sends one header byte every few seconds keeps its connection, and a file
descriptor, forever. The app never sees such a request (it runs once the headers are complete), so this lives in
the HTTP protocol: uvicorn's own httptools protocol with a timer armed when a head is awaited and cancelled when
it is complete.
"""

from __future__ import annotations

import asyncio

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


def header_deadline(timeout_s: float) -> type[HttpToolsProtocol]:
    """uvicorn's httptools protocol, closing a connection whose request head takes longer than `timeout_s`."""

    class HeaderDeadline(HttpToolsProtocol):
        _head_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._await_head()

        def on_headers_complete(self) -> None:
            self._cancel_head_timer()
            super().on_headers_complete()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._await_head()  # a keep-alive connection: the next head gets the same bound

        def connection_lost(self, exc: Exception | None) -> None:
            self._cancel_head_timer()
            super().connection_lost(exc)

        def _await_head(self) -> None:
            self._cancel_head_timer()
            self._head_timer = self.loop.call_later(timeout_s, self._head_timed_out)

        def _cancel_head_timer(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_timed_out(self) -> None:
            self._head_timer = None
            if not self.transport.is_closing():
                self.transport.close()

    return HeaderDeadline
