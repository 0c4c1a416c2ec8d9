"""Admission control: decide whether to take a request before spending anything on it.

A request is *in flight* from the moment it is admitted until its answer is written: while its body is
read, while it is decoded, while it waits in the batcher's queue and while the engine runs it. The gate
counts those against one limit. Past it, the service answers 503 + Retry-After at once, before reading or
decoding the body, so an overloaded server spends its CPU on requests it will finish rather than on
requests it will throw away. With the count bounded, the decode pool's backlog and the queue are bounded
too, and so is the latency of every admitted request: at most about `limit / throughput` seconds.
"""

from __future__ import annotations


class Admission:
    """In-flight counter with a limit, and an estimate of how long the current backlog takes to drain.

    Used from the event loop only (no lock needed): `try_enter()` / `leave()` around each request,
    `record(images, seconds)` after each engine call to keep the throughput estimate current.
    """

    def __init__(self, limit: int, smoothing: float = 0.2):
        if limit < 0:
            raise ValueError("the in-flight limit must be >= 0 (0 = no limit)")
        self.limit = limit  # 0: admit everything (to measure what happens without admission control)
        self.in_flight = 0
        self._smoothing = smoothing
        self._images_per_s: float | None = None

    def try_enter(self) -> bool:
        if self.limit and self.in_flight >= self.limit:
            return False
        self.in_flight += 1
        return True

    def leave(self) -> None:
        self.in_flight -= 1

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

    def drain_s(self) -> float:
        """Seconds to finish what is in flight now (1 s when there is no measurement yet)."""
        if not self._images_per_s:
            return 1.0
        return self.in_flight / self._images_per_s
