"""The micro-batcher gives every caller its own rows back, batches concurrent callers, and sheds when full."""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np

from servelab.service.batcher import DeadlineExceeded, MicroBatcher, QueueFull, RunCost


def _slow_identity(batches: list):
    def fn(x):
        batches.append(x.shape[0])
        time.sleep(0.02)
        return x[:, :, 0, 0] * 2  # [N, 3] derived from each row's own data
    return fn


def test_results_routed_to_their_callers():
    batches: list[int] = []

    async def main():
        b = MicroBatcher(_slow_identity(batches), max_batch=8, max_delay_s=0.01, max_queue=100)
        b.start()
        reqs = [np.full((1 + i % 3, 3, 2, 2), float(i), dtype=np.float32) for i in range(20)]
        outs = await asyncio.gather(*(b.submit(r) for r in reqs))
        await b.stop()
        return reqs, outs

    reqs, outs = asyncio.run(main())
    for r, o in zip(reqs, outs, strict=True):
        assert o.shape == (r.shape[0], 3)
        assert np.all(o == r[0, 0, 0, 0] * 2)
    assert max(batches) > 1  # concurrent callers shared engine calls
    assert all(n <= 8 for n in batches)


def test_queue_full_is_refused_immediately():
    async def main():
        b = MicroBatcher(_slow_identity([]), max_batch=1, max_delay_s=0.0, max_queue=2)
        b.start()
        x = np.zeros((1, 3, 2, 2), dtype=np.float32)
        tasks = [asyncio.ensure_future(b.submit(x)) for _ in range(6)]
        results = await asyncio.gather(*tasks, return_exceptions=True)
        await b.stop()
        return results

    results = asyncio.run(main())
    refused = [r for r in results if isinstance(r, QueueFull)]
    served = [r for r in results if isinstance(r, np.ndarray)]
    assert refused and served and len(refused) + len(served) == 6


def test_engine_error_reaches_every_caller():
    def boom(x):
        raise RuntimeError("engine exploded")

    async def main():
        b = MicroBatcher(boom, max_batch=4, max_delay_s=0.005, max_queue=10)
        b.start()
        x = np.zeros((1, 3, 2, 2), dtype=np.float32)
        res = await asyncio.gather(*(b.submit(x) for _ in range(3)), return_exceptions=True)
        await b.stop()
        return res

    res = asyncio.run(main())
    assert all(isinstance(r, RuntimeError) and "exploded" in str(r) for r in res)


def test_a_request_past_its_timeout_leaves_the_queue_from_any_place_uncomputed():
    computed: list[float] = []

    def slow(x):
        computed.extend(x[:, 0, 0, 0].tolist())
        time.sleep(0.3)
        return x[:, :, 0, 0]

    async def main():
        b = MicroBatcher(slow, max_batch=1, max_delay_s=0.0, max_queue=10)
        b.start()
        row = [np.full((1, 3, 2, 2), float(i), dtype=np.float32) for i in range(3)]
        running = asyncio.ensure_future(b.submit(row[0]))
        await asyncio.sleep(0.05)  # row 0 is in the engine
        patient = asyncio.ensure_future(b.submit(row[1], timeout_s=5.0))  # queued first
        hasty = asyncio.ensure_future(b.submit(row[2], timeout_s=0.1))  # queued behind it, gives up first
        results = await asyncio.gather(running, patient, hasty, return_exceptions=True)
        depth = b.depth
        await b.stop()
        return results, depth

    (r0, r1, r2), depth = asyncio.run(main())
    assert isinstance(r0, np.ndarray) and isinstance(r1, np.ndarray)
    assert isinstance(r2, DeadlineExceeded) and "0.1s in the queue" in str(r2)
    assert computed == [0.0, 1.0] and depth == 0


def _recording_run(batches: list, run_s: float, per_image_s: float = 0.0):
    """An engine whose batch of n takes run_s + per_image_s × n: flat like a GPU's (per_image_s 0), or growing
    with every image like a CPU's."""
    def fn(x):
        batches.append(x.shape[0])
        time.sleep(run_s + per_image_s * x.shape[0])
        return x[:, :, 0, 0]
    return fn


def _staggered(batcher: MicroBatcher, decode_s: list[float], x: np.ndarray):
    """Requests admitted together, each submitted `decode_s` seconds later (its body read and decoded)."""
    async def request(delay):
        arrived = batcher.expect()
        await asyncio.sleep(delay)
        arrived()
        return await batcher.submit(x)
    return asyncio.gather(*(request(d) for d in decode_s))


def _after_one_run(run_s: float, scenario, per_image_s: float = 0.0) -> list[int]:
    """The batch sizes the engine saw: one lone request first, and with a per-image cost a batch of four too (so
    the batcher knows what a run costs, and how much of it is fixed), then `await scenario(batcher, x)`."""
    batches: list[int] = []

    async def main():
        b = MicroBatcher(_recording_run(batches, run_s, per_image_s), max_batch=8, max_delay_s=0.002, max_queue=100)
        b.start()
        x = np.zeros((1, 3, 2, 2), dtype=np.float32)
        await b.submit(x)
        if per_image_s:
            await b.submit(np.zeros((4, 3, 2, 2), dtype=np.float32))
        await scenario(b, x)
        await b.stop()

    asyncio.run(main())
    return batches


def test_a_batch_waits_for_requests_still_being_decoded():
    """Eight requests decoded one after another (4 ms apart) run as one batch, not as the first one alone and
    then the other seven: the batcher holds the batch while admitted requests are still decoding."""
    async def eight(b, x):
        await _staggered(b, [0.004 * (i + 1) for i in range(8)], x)

    assert _after_one_run(0.08, eight) == [1, 8]


def test_the_hold_never_lasts_longer_than_a_run():
    """A decode that takes far longer than an engine run is not waited for: the others run after about one run's
    time, and the slow one in the next batch."""
    waited: list[float] = []

    async def two_fast_one_slow(b, x):
        t0 = time.perf_counter()
        fast = _staggered(b, [0.001, 0.002], x)
        slow = asyncio.ensure_future(_staggered(b, [1.0], x))
        await fast
        waited.append(time.perf_counter() - t0)
        await slow

    assert _after_one_run(0.05, two_fast_one_slow) == [1, 2, 1]
    assert waited[0] < 0.5  # about one hold (0.05 s) and one run (0.05 s), far from the slow decode's 1 s


def test_a_lone_request_is_not_held():
    """With nothing else admitted, a request runs after max_delay_s, however long the last run took."""
    took: list[float] = []

    async def one(b, x):
        t0 = time.perf_counter()
        await _staggered(b, [0.001], x)
        took.append(time.perf_counter() - t0)

    assert _after_one_run(0.3, one) == [1, 1]
    assert took[0] < 0.3 + 0.15  # one run and a little, not a run's worth of hold before it


def test_where_each_image_costs_the_engine_more_a_batch_does_not_wait_for_slow_decodes():
    """A CPU-like engine (2 ms per run plus 40 ms per image): eight requests decoded 15 ms apart are not all
    waited for (the old hold, one whole run of 162 ms, waited for all eight). Holding the engine idle for the later
    ones would cost more than the 2 ms they save by joining, so the first ones ready run at once and the rest form
    the next batches while the engine works."""
    async def eight(b, x):
        await _staggered(b, [0.015 * (i + 1) for i in range(8)], x)

    batches = _after_one_run(0.002, eight, per_image_s=0.04)
    assert batches[:2] == [1, 4]  # the two runs that taught it the cost
    assert sum(batches[2:]) == 8 and batches[2] <= 2  # cut within the max delay and the 2 ms fixed cost


def test_the_fixed_cost_is_fitted_from_the_batch_sizes_seen():
    cost = RunCost()
    assert cost.fixed_s() == 0.0  # nothing run yet: nothing worth waiting for
    cost.observe(8, 0.4)
    assert cost.fixed_s() == 0.4  # one size: nothing yet says how much of the run grows with the batch
    for n in (1, 2, 16):
        cost.observe(n, 0.006 + 0.045 * n)
    cost.observe(8, 0.006 + 0.045 * 8)  # a size seen again moves part way towards its new time
    assert 0.006 < cost.fixed_s() < 0.4
    for _ in range(20):
        cost.observe(8, 0.006 + 0.045 * 8)
    assert abs(cost.fixed_s() - 0.006) < 0.001
    flat = RunCost()
    for n in (1, 4, 16):
        flat.observe(n, 0.05)
    assert abs(flat.fixed_s() - 0.05) < 1e-9  # a GPU-like curve: the whole run is fixed
    steep = RunCost()
    steep.observe(1, 0.01)
    steep.observe(4, 0.06)
    assert steep.fixed_s() == 0.0  # a negative intercept is no fixed cost


def test_an_engine_of_several_instances_gets_the_queue_shared_out_and_runs_side_by_side():
    """With two instances free, eight waiting requests go four to each, and the two batches run at once."""
    batches: list[int] = []
    running, most = [0], [0]
    lock = threading.Lock()

    def fn(x):
        with lock:
            batches.append(x.shape[0])
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.2)
        with lock:
            running[0] -= 1
        return x[:, :, 0, 0]

    async def main():
        b = MicroBatcher(fn, max_batch=16, max_delay_s=0.01, max_queue=100, parallel=2)
        b.start()
        reqs = [np.full((1, 3, 2, 2), float(i), dtype=np.float32) for i in range(8)]
        outs = await asyncio.gather(*(b.submit(r) for r in reqs))
        await b.stop()
        return reqs, outs

    reqs, outs = asyncio.run(main())
    assert sorted(batches) == [4, 4] and most[0] == 2
    for r, o in zip(reqs, outs, strict=True):
        assert np.all(o == r[0, 0, 0, 0])


def test_only_the_runs_the_engine_says_teach_the_cost():
    """An engine of instances runs a lone batch on all its cores and overlapping ones on an instance each: two
    engines with different times. The engine says, on its own thread, how each run went; only the instances' runs
    teach the batcher what a batch costs."""
    how = threading.local()

    def fn(x):
        how.on_instance = x.shape[0] > 1  # here: a lone request runs "on all cores", the batches of 4 on instances
        time.sleep(0.05)
        return x[:, :, 0, 0]

    async def main():
        b = MicroBatcher(fn, max_batch=16, max_delay_s=0.01, max_queue=100, parallel=2,
                         teaches=lambda: how.on_instance)
        b.start()
        await b.submit(np.zeros((1, 3, 2, 2), dtype=np.float32))
        await asyncio.gather(*(b.submit(np.zeros((1, 3, 2, 2), dtype=np.float32)) for _ in range(8)))
        await b.stop()
        return b.cost.as_dict()["run_ms_by_batch"]

    assert list(asyncio.run(main())) == [4]  # the lone run of one image taught nothing
