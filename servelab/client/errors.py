"""Errors a client raises, typed so callers can tell a bad request from a dead server."""

from __future__ import annotations

from servelab.errors import ServelabError


class InferenceError(ServelabError, RuntimeError):
    """The server (or engine) refused or failed a request; `message` is the server's own words."""

    def __init__(self, message: str, *, status: int | None = None, code: str | None = None, backend: str = "",
                 retry_after: float | None = None):
        super().__init__(message)
        self.message, self.status, self.code, self.backend = message, status, code, backend
        self.retry_after = retry_after  # seconds the server asked us to wait (its Retry-After), if it said

    def __str__(self) -> str:
        where = f"{self.backend} " if self.backend else ""
        status = f"HTTP {self.status} " if self.status else ""
        code = f"[{self.code}] " if self.code else ""
        return f"{where}{status}{code}{self.message}".strip()


class ServiceUnavailable(InferenceError):
    """Nothing answered at the URL, or it is not ready."""
