"""What a record says about the machine: inside an image built on a stand-in base, it says so."""

from __future__ import annotations

from servelab.fingerprint import environment_fingerprint, machine_label, standin


def test_a_stand_in_image_is_named_in_the_fingerprint_and_the_label(monkeypatch):
    monkeypatch.setenv("SERVELAB_STANDIN", "nvcr.io/nvidia/tritonserver:25.10-py3 stand-in: python backend only")
    assert standin() == {"standin": "nvcr.io/nvidia/tritonserver:25.10-py3 stand-in: python backend only"}
    assert environment_fingerprint(weights="w")["standin"].startswith("nvcr.io/nvidia/tritonserver")
    m = {"hostname": "node", "cpu_model": "cpu", "cpu_usable": 2, "gpus": [], **standin()}
    assert machine_label(m).endswith("· stand-in image")


def test_a_real_machine_is_not_called_a_stand_in(monkeypatch):
    monkeypatch.delenv("SERVELAB_STANDIN", raising=False)
    assert standin() == {} and "standin" not in environment_fingerprint(weights="w")
    assert "stand-in" not in machine_label({"hostname": "h", "cpu_model": "c", "cpu_usable": 2, "gpus": []})
