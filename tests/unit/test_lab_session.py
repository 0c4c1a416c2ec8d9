"""The lab session: one call gives a lesson its endpoints, place, results folder, Step and load options."""

from __future__ import annotations

import pytest

from servelab.lab.session import HARNESS_KEYS, session


def test_a_notebook_opened_on_its_own_gets_this_places_defaults(monkeypatch):
    from servelab.lab.params import profile
    from servelab.lab.places import local_endpoints

    monkeypatch.delenv("SERVELAB_PLACE", raising=False)
    lab = session("04", {"harness": {}})
    assert lab.place == "local" and lab.out_dir.name == "interactive"
    assert lab.triton_http_url == local_endpoints().triton_http_url
    assert lab.triton_model == "openclip_vit_b32_cpu" and lab.triton_pid is None
    assert lab.load_knob == profile("default")["load"] and lab.extra_servers is True


def test_the_runners_harness_wins_and_names_injected_one_by_one_are_heard(tmp_path):
    from servelab.lab.params import profile

    smoke = profile("smoke")
    harness = {"place": "local", "out_dir": str(tmp_path / "run"), "triton_http_url": "http://127.0.0.1:9",
               "triton_pid": 42, "load": smoke["load"], "extra_servers": False, "profile": "smoke"}
    lab = session("04", {"harness": harness, "service_url": "http://127.0.0.1:7"})  # the grader injects names
    assert lab.out_dir == tmp_path / "run" and lab.triton_pid == 42 and lab.profile == "smoke"
    assert lab.triton_http_url == "http://127.0.0.1:9" and lab.service_url == "http://127.0.0.1:7"
    assert lab.triton_address == "127.0.0.1:9"
    assert lab.load.quick is True and lab.extra_servers is False
    assert lab.step.id == "04" and lab.step.out_dir == tmp_path / "run"


def test_an_unknown_harness_key_is_refused_with_the_known_ones():
    with pytest.raises(ValueError, match="unknown key.*batch_sizes.*known: place"):
        session("04", {"harness": {"batch_sizes": [1]}})
    assert "load" in HARNESS_KEYS and "triton_repository" in HARNESS_KEYS
