"""Request bodies within bounds: no body larger than the limit is buffered, and none may take forever to arrive.

    app.add_middleware(BoundedBody, max_bytes=64 * 2**20, timeout_s=30.0)

A plain ASGI middleware around `receive`, so every way a route reads its body (`request.body()`, `request.form()`,
`request.stream()`) gets the same limits. A request whose Content-Length is over the limit is refused with 413 at
its first read, before a byte of the body is taken; one without a Content-Length (chunked) is refused with 413 as
soon as the bytes read pass the limit. A body still arriving `timeout_s` after its headers is dropped with 408:
a client that sends slowly would otherwise hold its admission slot, and enough of them would shut everyone out.
The refusals are raised as `ApiError` from inside the route's read, so the app answers them with its JSON body.
"""

from __future__ import annotations

import asyncio

import numpy as np
from starlette.requests import ClientDisconnect

from servelab.service.errors import reject


class BoundedBody:
    """Refuse bodies over `max_bytes` (413) and bodies that take longer than `timeout_s` to arrive (408)."""

    def __init__(self, app, max_bytes: int, timeout_s: float):
        self.app, self.max_bytes, self.timeout_s = app, max_bytes, timeout_s

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        reader = _Reader(self, scope, receive)
        try:
            return await self.app(scope, reader, send)
        finally:
            reader.close()


class _Reader:
    """One request's `receive`: counts the body's bytes against the limit and its reads against the deadline.

    One timer per request, armed at the first read, not one per chunk (`asyncio.timeout_at` around each of a
    tensor's ten or so chunks cost a timer armed and cancelled each time, on the event loop): at the deadline it
    cancels a read in progress, which is answered 408; a read that starts after it is refused at once."""

    def __init__(self, bounds: BoundedBody, scope, receive):
        self.bounds, self.receive = bounds, receive
        self.loop = asyncio.get_running_loop()
        self.deadline = self.loop.time() + bounds.timeout_s
        self.declared = _content_length(scope)
        self.read, self.done = 0, False
        self._timer: asyncio.TimerHandle | None = None
        self._waiting: asyncio.Task | None = None  # the task inside a read, while it is
        self._cancelling = 0  # its cancellation requests when the read began (others' are not ours to answer)
        self._expired = self._cancelled_it = False

    async def __call__(self):
        if self.done:  # the body is in: what follows is the wait for a disconnect, which has no deadline
            return await self.receive()
        limit = self.bounds.max_bytes
        if self.declared is not None and self.declared > limit:
            self._too_large(f"the body is {self.declared} bytes (Content-Length)")
        if self._expired:
            self._timed_out()
        if self._timer is None:
            self._timer = self.loop.call_at(self.deadline, self._expire)
        task = self._waiting = asyncio.current_task()
        self._cancelling = task.cancelling()
        try:
            message = await self.receive()
        except asyncio.CancelledError:
            if self._cancelled_it and task.uncancel() <= self._cancelling:
                self._timed_out()
            raise
        finally:
            self._waiting = None
        if message["type"] == "http.request":
            self.read += len(message.get("body", b""))
            if self.read > limit:
                self._too_large(f"more than {limit} bytes of body arrived")
            self.done = not message.get("more_body", False)
        else:
            self.done = True
        if self.done:
            self.close()
        return message

    def _expire(self) -> None:
        self._timer, self._expired = None, True
        if self._waiting is not None:
            self._cancelled_it = True
            self._waiting.cancel()

    def close(self) -> None:
        """The body is in, or the request is over: the deadline no longer applies."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _timed_out(self):
        reject(408, "body_timeout", f"the request body did not arrive within {self.bounds.timeout_s:g}s of its "
                                    f"headers ({self.read} bytes came); send it whole and without pauses")

    def _too_large(self, what: str):
        reject(413, "body_too_large", f"{what}; the limit is {self.bounds.max_bytes} bytes per request: send fewer "
                                      "or smaller images per request")


def _content_length(scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None  # the server's parser refuses a malformed one before the app sees it
    return None


async def read_into(receive, size: int) -> tuple[np.ndarray, int]:
    """The request body read straight into one preallocated buffer of the `size` bytes its headers announced:
    (the uint8 buffer, the bytes that came). A longer body is read to its end and counted, not kept.

    Starlette's `request.body()` gathers the chunks and joins them, one more copy of every body on the event loop;
    a tensor's size is known from its headers before the first byte, so each chunk is copied once, into place."""
    buffer = np.empty(size, dtype=np.uint8)
    view = memoryview(buffer)
    got = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            raise ClientDisconnect()
        chunk = message.get("body", b"")
        end = got + len(chunk)
        if end <= size:
            view[got:end] = chunk
        got = end
        if not message.get("more_body", False):
            return buffer, got
