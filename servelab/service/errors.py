"""How the service refuses a request: one exception, answered as `{"error": {"code", "message"}}`.

The helpers are typed `NoReturn`, so a reader (and a type checker) knows the line after a refusal never runs.
"""

from __future__ import annotations

import math
from typing import NoReturn

from servelab.errors import ServelabError


class ApiError(ServelabError):
    """A refusal with its HTTP status, a stable machine-readable code and a message naming the problem."""

    def __init__(self, status: int, code: str, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.code, self.message, self.headers = status, code, message, headers or {}

    def body(self) -> dict:
        return {"error": {"code": self.code, "message": self.message}}


def reject(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> NoReturn:
    """Refuse the request: a 4xx for bad input (or 5xx for a broken server), with a JSON body saying why."""
    raise ApiError(status, code, message, headers)


def shed(code: str, message: str, retry_after_s: float) -> NoReturn:
    """Refuse for lack of capacity: 503 with Retry-After (whole seconds, at least 1) so clients back off."""
    raise ApiError(503, code, message, {"Retry-After": str(max(1, math.ceil(retry_after_s)))})
