"""Admission control: decide whether to take a request before spending anything on it.

A request is *in flight* from the moment it is admitted until its answer is written: while its body is
read, while it is decoded, while it waits in the batcher's queue and while the engine runs it. The gate
(`servelab.service.gate`, before the body is read) bounds that work and answers 503 + Retry-After past it:

- by count: at most `limit` requests in flight;
- by time: at most `max_wait_s` of expected wait, the images ahead (requests in flight × images per request)
  at the engine's measured pace. A count alone bounds the wait only on a machine of known speed: 64 requests
  are 0.7 s of work where the engine does 90 images/s and 3 s where it does 20;
- except that the first `always_admit` requests in flight are taken whatever their expected wait, while the gate
  is not refusing anyone. A closed loop of N clients never has more than N requests in flight, however slow the
  engine or large its batches, so a measurement at capacity of up to `always_admit` clients is never refused.
  Past capacity, an open loop keeps sending: the first refusal shows it, and from then until the Retry-After it
  gave has passed without another, only the time bound admits, so accepted requests wait about the budget,
  not about `always_admit` requests.

The estimate comes from the engine's own time, which leaves out decoding and HTTP, so it errs short; the
service also drops a request the time bound admitted once it has waited `max_wait_s` before the engine takes
it (app.Job), so the bound holds even where the estimate is wrong. An overloaded server thus spends its CPU on
requests it will finish within the budget rather than on requests that would wait for nobody.
"""

from __future__ import annotations

import math
import time

from servelab.errors import InvalidValue


class Admission:
    """In-flight counter with a count limit, a wait budget and a count always admitted while nothing is refused,
    and an estimate of how long the backlog takes.

    Used from the event loop only (no lock needed): `refusal()`, then `enter()` (which says whether the wait
    budget binds the request) or `refused()`; `leave()` once its answer is done; `images(n)` once its images are
    known, `record(images, seconds)` after each engine call to keep the pace current.
    """

    def __init__(self, limit: int, smoothing: float = 0.2, max_wait_s: float = 0.0, always_admit: int = 0,
                 clock=time.monotonic):
        if limit < 0:
            raise InvalidValue("the in-flight limit must be >= 0 (0 = no limit)")
        if max_wait_s < 0:
            raise InvalidValue("the wait budget must be >= 0 (0 = no budget)")
        if always_admit < 0:
            raise InvalidValue("the count always admitted must be >= 0 (0 = none)")
        self.limit = limit  # 0: admit everything (to measure what happens without admission control)
        self.max_wait_s = max_wait_s  # 0: no bound on the expected wait
        self.always_admit = always_admit  # 0: the time bound decides from the first request on
        self.in_flight = 0
        self._smoothing = smoothing
        self._images_per_s: float | None = None
        self._images_per_request = 1.0
        self._clock = clock
        self._strict_until = -math.inf  # refusing: until then only the time bound admits

    def refusal(self) -> str | None:
        """Why a request arriving now is refused (None: it is admitted)."""
        if self.limit and self.in_flight >= self.limit:
            return f"{self.in_flight} requests in flight, the limit is {self.limit}; retry later"
        if self.within_count():
            return None
        wait = self.expected_wait_s()
        if self.max_wait_s and wait is not None and wait > self.max_wait_s:
            return (f"{self.in_flight} requests in flight would keep a new one waiting about {wait * 1000:.0f} ms, "
                    f"over the {self.max_wait_s * 1000:.0f} ms wait budget; retry later")
        return None

    def within_count(self) -> bool:
        """Whether a request arriving now is one of the `always_admit` taken whatever their wait: fewer are in
        flight, and the gate has not refused anyone within the Retry-After it last gave."""
        return self.in_flight < self.always_admit and self._clock() >= self._strict_until

    def enter(self) -> bool:
        """Count an admitted request in; True when the wait budget binds it (the time bound admitted it)."""
        bounded = bool(self.max_wait_s) and not self.within_count()
        self.in_flight += 1
        return bounded

    def refused(self) -> float:
        """A request was refused: the seconds its Retry-After asks for. Until they pass, the gate is past capacity
        and admits by the time bound alone."""
        retry_after_s = max(1, math.ceil(self.drain_s()))
        self._strict_until = max(self._strict_until, self._clock() + retry_after_s)
        return retry_after_s

    def leave(self) -> None:
        self.in_flight -= 1

    def images(self, n: int) -> None:
        """One admitted request's image count, now known: the estimate counts images, not requests."""
        self._images_per_request += self._smoothing * (n - self._images_per_request)

    def record(self, images: int, seconds: float) -> None:
        """One engine call finished: fold its pace (images per second of engine time) into the estimate."""
        if seconds <= 0:
            return
        rate = images / seconds
        prev = self._images_per_s
        self._images_per_s = rate if prev is None else prev + self._smoothing * (rate - prev)

    @property
    def images_per_s(self) -> float | None:
        return self._images_per_s

    def expected_wait_s(self) -> float | None:
        """Seconds a request admitted now would wait for the images ahead of it (None: no measurement yet)."""
        if not self._images_per_s:
            return None
        return self.in_flight * self._images_per_request / self._images_per_s

    def drain_s(self) -> float:
        """Seconds to finish what is in flight now (1 s when there is no measurement yet)."""
        wait = self.expected_wait_s()
        return 1.0 if wait is None else wait
