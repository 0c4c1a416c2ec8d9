"""The emulated device's sharing model (pure functions, exact) and the device shared by real processes."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time

import pytest

from servelab.model.device_profile import DeviceProfile, profile
from servelab.model.emulated_device import EmulatedDevices, advance, finish_time

FLAT = profile("flat")  # t(B) = 168 ms up to 4 images, then 40 ms per image


def _state(now, **batches):
    return {"t": now, "batches": {k: [size, 1.0] for k, size in batches.items()}}


def test_batches_that_start_together_finish_together_as_one_batch_of_their_combined_size():
    state = _state(0.0, a=8, b=8)
    assert finish_time(state, "a", FLAT.t_s) == pytest.approx(FLAT.t_s(16))
    assert finish_time(state, "b", FLAT.t_s) == pytest.approx(FLAT.t_s(16))


def test_a_batch_joining_a_device_with_room_slows_nobody():
    state = advance(_state(0.0, a=1), 0.010, FLAT.t_s)
    state["batches"]["b"] = [1, 1.0]
    assert finish_time(state, "a", FLAT.t_s) == pytest.approx(FLAT.t_s(1))  # t(2) = t(1): the device had room
    assert finish_time(state, "b", FLAT.t_s) == pytest.approx(0.010 + FLAT.t_s(1))


def test_a_full_device_is_shared_and_a_departure_speeds_up_the_rest():
    state = _state(0.0, a=8)
    state = advance(state, FLAT.t_s(8) / 2, FLAT.t_s)  # a is half done
    state["batches"]["b"] = [8, 1.0]
    # together: 16 images, t(16) per unit of work for a's remaining half, then b alone at t(8) per unit
    a_done = FLAT.t_s(8) / 2 + 0.5 * FLAT.t_s(16)
    assert finish_time(state, "a", FLAT.t_s) == pytest.approx(a_done)
    assert finish_time(state, "b", FLAT.t_s) == pytest.approx(a_done + 0.5 * FLAT.t_s(8))
    later = advance(state, a_done + 0.001, FLAT.t_s)
    assert list(later["batches"]) == ["b"]


def test_finished_batches_leave_the_state_even_when_their_owner_never_comes_back():
    assert advance(_state(0.0, a=4, b=32), 10.0, FLAT.t_s)["batches"] == {}


def test_a_batch_alone_waits_its_profile_time(tmp_path):
    devices = EmulatedDevices(FLAT, tmp_path)
    for images in (1, 8):
        waited = devices.execute(images)
        assert FLAT.t_s(images) <= waited < FLAT.t_s(images) * 1.25 + 0.003


def test_processes_share_one_device(tmp_path):
    """Two processes each run a batch of 8 (the device full) at once: both take t(16), not t(8)."""
    code = ("import sys, time; from servelab.model.device_profile import profile; "
            "from servelab.model.emulated_device import EmulatedDevices; "
            "d = EmulatedDevices(profile('flat'), sys.argv[1]); start = float(sys.argv[2]); "
            "time.sleep(max(0, start - time.time())); print(d.execute(8))")
    start = time.time() + 1.5  # both processes imported and waiting
    procs = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path), str(start)], stdout=subprocess.PIPE,
                              text=True) for _ in range(2)]
    waited = [float(p.communicate(timeout=60)[0]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert max(waited) == pytest.approx(FLAT.t_s(16), rel=0.2)
    assert max(waited) > 1.5 * FLAT.t_s(8)


def test_two_devices_run_batches_side_by_side(tmp_path):
    import threading

    devices = EmulatedDevices(FLAT.with_devices(2), tmp_path)
    waited = []
    threads = [threading.Thread(target=lambda k=k: waited.append(devices.execute(8, device=k))) for k in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert max(waited) < FLAT.t_s(8) * 1.25 + 0.003  # not t(16): each had a device to itself


def test_the_default_state_folder_is_this_users_own_and_private(tmp_path, monkeypatch):
    import tempfile

    from servelab.config import Settings

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the machine's temporary folder, for this test
    folder = Settings().device_dir
    assert folder.parent == tmp_path and str(os.getuid()) in folder.name
    devices = EmulatedDevices(FLAT, folder)
    devices.execute(1)
    for made in (folder, devices.folder):
        assert stat.S_IMODE(os.lstat(made).st_mode) == 0o700
    assert stat.S_IMODE(os.lstat(devices.folder / "device-0.json").st_mode) == 0o600


def test_a_link_planted_at_the_old_shared_path_is_not_followed(tmp_path, monkeypatch):
    import tempfile

    from servelab.config import Settings

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    victim = tmp_path / "victim"
    victim.mkdir()
    (tmp_path / "servelab-emulated-devices").symlink_to(victim)  # the fixed name every user once shared
    EmulatedDevices(FLAT, Settings().device_dir).execute(1)
    assert list(victim.iterdir()) == []


def test_links_planted_in_the_state_folder_are_refused(tmp_path):
    victim = tmp_path / "victim.json"
    victim.write_text("{}")
    folder = tmp_path / "devices"
    (folder / FLAT.name).mkdir(parents=True, mode=0o700)
    (folder / FLAT.name / "device-0.json").symlink_to(victim)
    with pytest.raises(RuntimeError, match="symbolic link"):
        EmulatedDevices(FLAT, folder)
    linked = tmp_path / "linked"
    linked.symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    (tmp_path / "elsewhere").mkdir(mode=0o700)
    with pytest.raises(RuntimeError, match="symbolic link"):
        EmulatedDevices(FLAT, linked)
    assert victim.read_text() == "{}"


def test_a_state_folder_others_may_write_is_refused(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(RuntimeError, match="others may write"):
        EmulatedDevices(FLAT, shared)


# a device whose lone batch of one takes 3 µs (within the timers' slack: done on arrival) and whose large batches
# take a while (20 ms per 10,000 images), so one process's large batch keeps it busy for another's small one
QUICK = DeviceProfile(name="quick", fixed_ms=0.001, per_image_ms=0.002, full_at=1, source="a test profile")


def _file_state(devices: EmulatedDevices, device: int = 0) -> dict:
    raw = (devices.folder / f"device-{device}.json").read_bytes()
    return json.loads(raw) if raw.strip() else {}


def test_a_batch_the_idle_device_runs_at_once_is_neither_written_nor_waited_for(tmp_path):
    devices = EmulatedDevices(QUICK, tmp_path)
    path = devices.folder / "device-0.json"
    before = path.read_bytes()
    for _ in range(3):
        with devices.occupied(1) as batch:
            pass
        assert batch.waited_s >= 0
    assert path.read_bytes() == before  # the device's state as it was: no write, so no other process waits on it


def test_a_small_batch_joining_a_busy_device_is_written_and_shares_it(tmp_path):
    """Another user's large batch on the device (another EmulatedDevices on the folder, as another process would
    be): a batch of one that alone would be done on arrival now joins it, and leaves no later than it does."""
    other, ours = EmulatedDevices(QUICK, tmp_path), EmulatedDevices(QUICK, tmp_path)
    with other.occupied(10_000):  # t(10,000) = 20 ms
        with ours.occupied(1) as batch:
            shared = _file_state(ours)["batches"]
            assert batch.id in shared and len(shared) == 2
    assert _file_state(ours)["batches"] == {}  # both left; a shorter state written over a longer one still reads
    assert batch.waited_s > 0


def test_a_state_another_process_wrote_is_read_not_the_one_seen_before(tmp_path):
    ours, other = EmulatedDevices(FLAT, tmp_path), EmulatedDevices(FLAT, tmp_path)
    assert ours.occupancy(0) == 0
    with other.occupied(3):
        assert ours.occupancy(0) == 3
    assert ours.occupancy(0) == 0
