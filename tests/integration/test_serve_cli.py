"""`servelab serve`'s options reach the service's settings: a real `servelab serve` on loopback (the emulated
device, so no model loads), read back through /info."""

from __future__ import annotations

import subprocess
import sys

import httpx

from servelab.service.process import ServiceProcess


class ServeCommand(ServiceProcess):
    """`python -m servelab.cli serve <options>` instead of `python -m servelab.service`."""

    def __init__(self, options: list[str], **kw):
        super().__init__(**kw)
        self.options = options

    def command(self) -> list[str]:
        return [sys.executable, "-m", "servelab.cli", "serve", *self.options]


def test_the_decode_option_sets_where_jpegs_are_decoded(tmp_path):
    env = {"SERVELAB_ENGINE": "emulated", "SERVELAB_DEVICE_PROFILE": "linear", "SERVELAB_WARMUP_ITERS": "1",
           "SERVELAB_DEVICE_DIR": str(tmp_path / "devices"), "SERVELAB_DECODE": "device"}  # the option wins
    with ServeCommand(["--decode", "cpu"], env=env, log_path=tmp_path / "serve.log") as svc:
        decode = httpx.get(svc.url + "/info", timeout=10).json()["decode"]
    assert decode["setting"] == "cpu" and decode["in_force"] == "cpu" and decode["why"] == "the decode setting is cpu"


def test_a_decode_place_it_does_not_know_is_refused_in_one_line(tmp_path):
    done = subprocess.run([sys.executable, "-m", "servelab.cli", "serve", "--decode", "gpu", "--port", "0"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "decode must be one of auto, device, cpu, got 'gpu'" in lines[0], done.stderr
