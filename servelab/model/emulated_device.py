"""An emulated accelerator shared by every process on the machine: running a batch waits, it does not compute.

    from servelab.model.device_profile import profile
    from servelab.model.emulated_device import EmulatedDevices
    devices = EmulatedDevices(profile("flat"), "build/emulated-devices")   # a folder every user of it names
    devices.execute(8)              # returns after the batch of 8 has had its time on a device (no CPU used)
    devices.execute(8, device=1)    # on device 1 (a Triton instance pinned to it); default: the least busy
    with devices.occupied(8):       # the block's own (CPU) work runs inside the batch's device time
        out = make_output()

How overlapping batches share a device (a fluid model of a GPU sharing its multiprocessors): while the device
holds batches of n images in total, every one of them progresses at 1 ÷ t(n) of its work per second. A batch
alone takes t(B); batches that start together finish together after t(combined size), as if they had run as
one batch; a batch joining a device that still has room (t flat) slows nobody, and once the device is full
(t linear) they share it in proportion. So a second Triton instance helps while batches leave the device room
and stops helping once they fill it, as on a GPU.

Sharing across processes: each device is a small JSON state file (the batches in flight and how much of each is
left) under a folder of the user's own (0700, never reached through a symbolic link), read and written under an
exclusive `flock`. A batch's finish time is exact given the
batches already there (departures included); a later arrival can only postpone it, so a waiter sleeps until
its finish time, re-reads the state, and sleeps again only if someone joined meanwhile. A process killed
mid-batch leaves nothing stuck: its batch simply finishes on schedule.

What that costs the process: one locked read per batch where the device runs the batch at once, as a device whose
t(B) is a microsecond does (`servelab bench frontend`): a batch that would finish within the timers' slack of its
arrival has finished on arrival (as `advance` already counts it), so it is never written, nor waited for, nor read
again. Otherwise a locked read and write to join, and one to leave after its sleep. A write leaves the file's length
as it was where the new state is shorter (padded with spaces, which JSON ignores) instead of truncating it, and a
state read back unchanged since this process last saw it is not parsed again.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from servelab.errors import InvalidValue
from servelab.model.device_profile import DeviceProfile
from servelab.private_files import open_private, private_folder

# A batch whose finish lies within this of now has finished (timers wake a little late, never early).
_SLACK_S = 20e-6


def advance(state: dict, now: float, t_s: Callable[[int], float]) -> dict:
    """The device state at `now`: every batch in flight progressed, finished ones removed (a pure function).

    state = {"t": time of the state, "batches": {id: [images, work left in (0, 1]]}}."""
    last = min(state.get("t", now), now)  # a state from before a reboot (another monotonic clock) starts now
    batches = {k: list(v) for k, v in state.get("batches", {}).items()}
    while batches:
        span = t_s(sum(size for size, _ in batches.values()))  # seconds for a whole unit of work at this load
        first = min(left for _, left in batches.values())
        if last + first * span > now + _SLACK_S:
            done = max(0.0, now - last) / span
            for b in batches.values():
                b[1] -= done
            last = max(last, now)
            break
        last += first * span
        batches = {k: [size, left - first] for k, (size, left) in batches.items() if left - first > 1e-9}
    return {"t": max(last, now), "batches": batches}


def finish_time(state: dict, batch_id: str, t_s: Callable[[int], float]) -> float:
    """When `batch_id` finishes if no other batch joins (departures of the others included)."""
    now, batches = state["t"], {k: list(v) for k, v in state["batches"].items()}
    while batch_id in batches:
        span = t_s(sum(size for size, _ in batches.values()))
        first = min(left for _, left in batches.values())
        now += first * span
        batches = {k: [size, left - first] for k, (size, left) in batches.items() if left - first > 1e-9}
    return now


def state_folder_name(profile_name: str) -> str:
    """The folder holding a profile's device state: its name when that is a plain file name, else a cleaned name
    with a hash of the real one (a profile's name may be a run's path, which must not leave the devices' folder,
    and two names that clean alike must not share devices)."""
    clean = re.sub(r"[^A-Za-z0-9_.-]+", "_", profile_name).strip("._-")[:64]
    if clean == profile_name:
        return clean
    return f"{clean or 'profile'}-{hashlib.sha256(profile_name.encode()).hexdigest()[:12]}"


class _SharedState:
    """One device's state file, locked with flock for every read-modify-write (processes and threads alike)."""

    _PAD_LIMIT = 4096  # a file longer than its state by more than this is truncated, not padded

    def __init__(self, path: Path):
        self.path = path
        self._fd = open_private(path, os.O_RDWR)  # never through a link: one planted here would redirect us
        self._thread_lock = threading.Lock()  # flock is per open file: threads of one process share it
        self._seen: tuple[bytes, dict] = (b"", {})  # the file's bytes as this process last read or wrote them, parsed

    def update(self, change: Callable[[dict], dict | None]) -> dict:
        """The state `change(state)` makes of the file's, written back; `change` returns None to leave the file
        as it is (the state returned is then the one read). `change` must not modify the state it is given: it
        may be the one this process parsed before."""
        with self._thread_lock:
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            try:
                raw = os.pread(self._fd, 1 << 20, 0)
                state = self._parse(raw)
                new = change(state)
                if new is None:
                    return state
                data = json.dumps(new).encode()
                if len(raw) > len(data) + self._PAD_LIMIT:
                    os.ftruncate(self._fd, 0)
                elif len(raw) > len(data):
                    data = data.ljust(len(raw))  # the file's length kept: a truncation costs more than the write
                os.pwrite(self._fd, data, 0)
                self._seen = (data, new)
                return new
            finally:
                fcntl.flock(self._fd, fcntl.LOCK_UN)

    def _parse(self, raw: bytes) -> dict:
        seen_raw, seen = self._seen
        if raw == seen_raw:
            return seen
        try:
            state = json.loads(raw) if raw.strip() else {}
        except ValueError:  # a writer killed mid-write: its batches are lost, the device goes on
            state = {}
        self._seen = (raw, state)
        return state

    def __del__(self):
        with contextlib.suppress(Exception):
            os.close(self._fd)


class EmulatedDevices:
    """The profile's devices, shared through state files under `folder` by every process that names it."""

    def __init__(self, profile: DeviceProfile, folder: Path | str):
        self.profile = profile
        fix = "remove it, or set SERVELAB_DEVICE_DIR to a folder only you can write"
        self.folder = private_folder(private_folder(Path(folder), fix) / state_folder_name(profile.name), fix)
        self._states = [_SharedState(self.folder / f"device-{i}.json") for i in range(profile.devices)]

    def occupancy(self, device: int) -> int:
        """Images in flight on `device` now."""
        state = self._states[device].update(lambda s: advance(s, time.monotonic(), self.profile.t_s))
        return sum(size for size, _ in state["batches"].values())

    def least_busy(self) -> int:
        if len(self._states) == 1:
            return 0
        return min(range(len(self._states)), key=self.occupancy)

    def execute(self, images: int, device: int | None = None) -> float:
        """Occupy a device with a batch of `images` until the fluid model says it is done; returns seconds waited."""
        with self.occupied(images, device) as batch:
            pass
        return batch.waited_s

    @contextlib.contextmanager
    def occupied(self, images: int, device: int | None = None):
        """`with devices.occupied(8): work()` — the batch joins a device on entry and the block's own work runs
        inside its device time; the exit waits until the device is done with it."""
        if images < 1:
            raise InvalidValue(f"a batch holds at least one image, got {images}")
        device = self.least_busy() if device is None else device % len(self._states)
        shared, t_s = self._states[device], self.profile.t_s
        batch = _Batch(uuid.uuid4().hex, device, time.monotonic())
        finish = batch.started

        def join(state):
            nonlocal finish
            now = time.monotonic()
            state = advance(state, now, t_s)
            state["batches"][batch.id] = [images, 1.0]
            finish = finish_time(state, batch.id, t_s)
            if finish <= now + _SLACK_S:  # done on arrival, as advance would count it: nothing to write or wait for
                return None
            return state

        state = shared.update(join)
        yield batch
        while batch.id in state.get("batches", ()):
            wait = finish - time.monotonic()
            if wait > _SLACK_S:  # a sleep of nothing still costs a timer's slack (tens of microseconds)
                time.sleep(wait)
            state = shared.update(lambda s: advance(s, time.monotonic(), t_s))
            if batch.id in state["batches"]:
                finish = finish_time(state, batch.id, t_s)
        batch.waited_s = time.monotonic() - batch.started


@dataclass
class _Batch:
    id: str
    device: int
    started: float
    waited_s: float = 0.0
