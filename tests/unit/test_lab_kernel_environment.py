"""A lab run hands its notebook kernels settings through the kernel process's own environment, built explicitly
(the provider `--device cuda` chose, the CPU pinning), never by writing this process's os.environ."""

from __future__ import annotations

import os

from servelab.bench.load.cpu import PINNING_ENV
from servelab.config import Settings
from servelab.lab import notebooks as nbs
from servelab.lab.runner import kernel_environment

SOURCE = '''# %%
import json
import os
from pathlib import Path

from servelab.bench.load.cpu import current_pinning
from servelab.config import Settings

s = Settings.from_env()
Path("seen.json").write_text(json.dumps({"provider": s.provider, "pinning": current_pinning()}))
'''


def test_the_kernel_reads_the_provider_and_pinning_it_was_given_and_this_process_is_unchanged(tmp_path):
    import json

    py = tmp_path / "99_env.py"
    py.write_text(SOURCE)
    [ipynb] = nbs.sync([py])
    before = dict(os.environ)
    env = kernel_environment(Settings(provider="cuda"), "client on core(s) 0, server on 1")
    nbs.execute(ipynb, tmp_path / "out.ipynb", {}, cwd=tmp_path, env=env)
    assert json.loads((tmp_path / "seen.json").read_text()) == {"provider": "cuda",
                                                                "pinning": "client on core(s) 0, server on 1"}
    assert dict(os.environ) == before and PINNING_ENV not in os.environ
