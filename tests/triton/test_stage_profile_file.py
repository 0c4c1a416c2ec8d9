"""A device profile given as a file (`SERVELAB_DEVICE_PROFILE=<file>.json servelab triton stage`) reaches the
emulated model in a real tritonserver, even when the profile's name is a path and the file is gone by then."""

from __future__ import annotations

import numpy as np
import pytest
import tritonclient.http as th

from servelab.model.device_profile import DeviceProfile, write_profile
from servelab.model.emulated_device import EmulatedDevices
from servelab.triton.control import get_config, model_states
from servelab.triton.models import EMULATED_ENCODER
from servelab.triton.repository import stage
from servelab.triton.server import EmbeddedTriton

pytestmark = pytest.mark.triton

# a name as `servelab bench device-profile` may give one: a run's path, with a slash and a space in it
PATH_NAME = "results/run 1/onnx-cuda"
# its source is not ASCII (as a profile's "1 µs per batch" is not): the python backend's interpreter reads files in
# an ASCII locale unless told the encoding
PROFILE = DeviceProfile(name=PATH_NAME, fixed_ms=2.0, per_image_ms=0.5, full_at=1,
                        source="a test profile file: 2,000 µs + 500 µs per image")


def test_a_profile_whose_name_is_a_path_keeps_its_state_inside_the_devices_folder(tmp_path):
    devices = EmulatedDevices(PROFILE, tmp_path / "devices")
    devices.execute(1)
    assert devices.folder.parent == tmp_path / "devices"
    assert (devices.folder / "device-0.json").is_file()
    assert EmulatedDevices(PROFILE, tmp_path / "devices").folder == devices.folder  # every user finds the same state
    other = EmulatedDevices(DeviceProfile(name="results/run 1/onnx_cuda", fixed_ms=1.0, per_image_ms=0.5,
                                          full_at=1, source="another"), tmp_path / "devices")
    assert other.folder != devices.folder  # names that read alike after cleaning keep their own devices


def test_a_profile_file_is_staged_and_served_by_triton(onnx_meta, settings, tmp_path):
    profile_file = write_profile(PROFILE, tmp_path / "profiles" / "custom.json")
    ours = settings.with_(device_profile=str(profile_file), device_dir=tmp_path / "devices")
    stage("cpu", tmp_path / "models", instances=1, settings=ours)
    profile_file.unlink()  # the staged repository holds the profile itself, not a pointer to this file
    with EmbeddedTriton(tmp_path / "models", log_path=tmp_path / "tritonserver.log", models=[EMULATED_ENCODER],
                        startup_timeout=240) as srv:
        assert model_states(srv.http_url)[EMULATED_ENCODER] == "READY"
        cfg = get_config(srv.http_url, EMULATED_ENCODER)
        assert cfg["parameters"]["weights"]["string_value"] == f"emulated {PATH_NAME}"
        client = th.InferenceServerClient(srv.http_address)
        batch = np.zeros((2, 3, 224, 224), np.float32)
        inp = th.InferInput("pixel_values", list(batch.shape), "FP32")
        inp.set_data_from_numpy(batch)
        out = client.infer(EMULATED_ENCODER, [inp]).as_numpy("embedding")
        assert out.shape == (2, 512)
    [state] = (tmp_path / "devices").glob("*/device-0.json")  # one device, inside the devices' folder
    assert state.parent.parent == tmp_path / "devices"

