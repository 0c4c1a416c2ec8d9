"""Retrying a refused request: the server said "not now" (503, 429), so wait as long as it asked, then try again.

Bounded twice: at most `retries` more attempts and no attempt started after `budget_s` seconds. The wait is
the server's Retry-After when it sent one (plus up to 25 % jitter, so clients told "1 s" do not all return
in the same instant), else exponential backoff with jitter. Anything else — bad input, a model that failed
to load, no server at all — is raised at once: retrying would not change the answer.
"""

from __future__ import annotations

import logging
import random

from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    stop_before_delay,
    wait_exponential_jitter,
)
from tenacity.wait import wait_base

from servelab.client.errors import InferenceError

log = logging.getLogger("servelab.client")

RETRY_STATUSES = (429, 503)


def is_retryable(exc: BaseException) -> bool:
    return isinstance(exc, InferenceError) and exc.status in RETRY_STATUSES and exc.code != "model_failed"


class wait_retry_after(wait_base):
    """The server's Retry-After (with jitter) when given, else `fallback`; never more than `cap` seconds."""

    def __init__(self, fallback: wait_base, cap: float):
        self.fallback, self.cap = fallback, cap

    def __call__(self, state: RetryCallState) -> float:
        asked = getattr(state.outcome.exception(), "retry_after", None) if state.outcome else None
        wait = asked * (1 + 0.25 * random.random()) if asked is not None else self.fallback(state)
        return min(self.cap, wait)


def _say(state: RetryCallState) -> None:
    exc = state.outcome.exception()
    log.info("servelab client: %s; retry %d in %.1fs", exc, state.attempt_number, state.upcoming_sleep)


def retrying(retries: int = 4, budget_s: float = 30.0, max_wait_s: float = 10.0) -> Retrying:
    """A tenacity policy: `retrying()(fn, *args)` calls fn, retrying 429/503 as described above."""
    return Retrying(
        retry=retry_if_exception(is_retryable),
        stop=stop_after_attempt(retries + 1) | stop_before_delay(budget_s),
        wait=wait_retry_after(wait_exponential_jitter(initial=0.1, max=max_wait_s), cap=max_wait_s),
        before_sleep=_say,
        reraise=True,
    )
