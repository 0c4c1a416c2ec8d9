"""Admission control: decide whether to take a request before spending anything on it.

A request is *in flight* from the moment it is admitted until its answer is written: while its body is
read, while it is decoded, while it waits in the batcher's queue and while the engine runs it. The gate
bounds that work twice, before reading or decoding the body, and answers 503 + Retry-After past either bound:

- by count: at most `limit` requests in flight;
- by time: at most `max_wait_s` of expected wait, the images ahead (requests in flight × images per request)
  at the engine's measured pace. A count alone bounds the wait only on a machine of known speed: 64 requests
  are 0.7 s of work where the engine does 90 images/s and 3 s where it does 20.

The estimate comes from the engine's own time, which leaves out decoding and HTTP, so it errs short; the
service also drops a request that has already waited `max_wait_s` before the engine takes it (app.Job), so
the bound holds even where the estimate is wrong. An overloaded server thus spends its CPU on requests it
will finish within the budget rather than on requests that would wait for nobody.
"""

from __future__ import annotations


class Admission:
    """In-flight counter with a count limit and a wait budget, and an estimate of how long the backlog takes.

    Used from the event loop only (no lock needed): `refusal()` then `enter()` (or `try_enter()`) and
    `leave()` around each request, `images(n)` once its images are known, `record(images, seconds)` after
    each engine call to keep the pace current.
    """

    def __init__(self, limit: int, smoothing: float = 0.2, max_wait_s: float = 0.0):
        if limit < 0:
            raise ValueError("the in-flight limit must be >= 0 (0 = no limit)")
        if max_wait_s < 0:
            raise ValueError("the wait budget must be >= 0 (0 = no budget)")
        self.limit = limit  # 0: admit everything (to measure what happens without admission control)
        self.max_wait_s = max_wait_s  # 0: no bound on the expected wait
        self.in_flight = 0
        self._smoothing = smoothing
        self._images_per_s: float | None = None
        self._images_per_request = 1.0

    def refusal(self) -> str | None:
        """Why a request arriving now is refused (None: it is admitted)."""
        if self.limit and self.in_flight >= self.limit:
            return f"{self.in_flight} requests in flight, the limit is {self.limit}; retry later"
        wait = self.expected_wait_s()
        if self.max_wait_s and wait is not None and wait > self.max_wait_s:
            return (f"{self.in_flight} requests in flight would keep a new one waiting about {wait * 1000:.0f} ms, "
                    f"over the {self.max_wait_s * 1000:.0f} ms wait budget; retry later")
        return None

    def enter(self) -> None:
        self.in_flight += 1

    def try_enter(self) -> bool:
        if self.refusal() is not None:
            return False
        self.enter()
        return True

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
