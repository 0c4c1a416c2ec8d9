"""The lab's place (local | node): a notebook given only `place=node` — plain papermill on the node, or opened in
the node's JupyterLab where SERVELAB_PLACE=node — derives the node's endpoints, the GPU model names and a
writable out_dir itself, instead of keeping this machine's loopback ports and a path relative to its cwd."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from servelab.lab import notebooks as nbs
from servelab.lab.places import place_defaults
from servelab.provision import NODE_PORTS
from servelab.vocabulary import Place

ENDPOINT_PARAMS = {"service_url", "triton_http_url", "triton_grpc_url", "triton_metrics_url", "triton_model",
                   "triton_jpeg_model"}

SCRATCH = '''# %% tags=["parameters"]
place = ""
out_dir = ""
service_url = ""
triton_grpc_url = ""
triton_model = ""
report = ""

# %%
from servelab.lab.places import place_defaults

globals().update(place_defaults(globals()))

# %%
import json
from pathlib import Path

Path(out_dir).mkdir(parents=True, exist_ok=True)
Path(report).write_text(json.dumps(dict(place=place, out_dir=out_dir, service_url=service_url,
                                        triton_grpc_url=triton_grpc_url, triton_model=triton_model)))
'''


@pytest.fixture
def no_place_env(monkeypatch):
    for var in ("SERVELAB_PLACE", "SERVELAB_NODE_HOST", *(f"SERVELAB_NODE_{n.upper()}_PORT" for n in NODE_PORTS)):
        monkeypatch.delenv(var, raising=False)


def test_place_defaults_fill_only_what_was_left_empty(no_place_env, monkeypatch):
    ns = {"place": "node", "out_dir": "", "service_url": "", "triton_model": "", "triton_http_url": "http://x:1"}
    got = place_defaults(ns)
    assert got["place"] == "node" and got["service_url"] == f"http://127.0.0.1:{NODE_PORTS['service']}"
    assert got["triton_model"] == "openclip_vit_b32" and "triton_http_url" not in got  # an explicit value stays
    assert got["out_dir"].endswith("results/interactive") and got["out_dir"].startswith("/")
    local = place_defaults({"place": "", "triton_model": "", "service_url": ""})
    assert local["place"] == "local" and local["triton_model"] == "openclip_vit_b32_cpu"
    assert local["service_url"] == "http://127.0.0.1:8002"  # `make serve`'s port
    monkeypatch.setenv("SERVELAB_PLACE", "node")  # what the node's Jupyter containers set
    assert place_defaults({"place": ""})["place"] == "node"
    with pytest.raises(ValueError, match="place must be one of local, node"):
        place_defaults({"place": "gpu"})
    assert tuple(Place) == ("local", "node")


def test_plain_papermill_with_only_place_node(tmp_path, no_place_env, monkeypatch):
    """The README's papermill line on the node, run from another working directory than notebooks/."""
    from servelab.lab.places import interactive_out_dir

    nbs.ensure_kernel()
    py = tmp_path / "nb" / "98_scratch.py"
    py.parent.mkdir()
    py.write_text(SCRATCH)
    nbs.sync([py])
    monkeypatch.setenv("SERVELAB_NODE_HOST", "10.1.2.3")
    report = tmp_path / "report.json"
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    out = subprocess.run([sys.executable, "-m", "papermill", str(nbs.ipynb_for(py)), str(tmp_path / "out.ipynb"),
                          "-k", nbs.KERNEL, "-p", "place", "node", "-p", "report", str(report)],
                         cwd=cwd, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(report.read_text())
    assert got == {"place": "node", "out_dir": str(interactive_out_dir()),
                   "service_url": f"http://10.1.2.3:{NODE_PORTS['service']}",
                   "triton_grpc_url": f"10.1.2.3:{NODE_PORTS['triton_grpc']}", "triton_model": "openclip_vit_b32"}


@pytest.mark.parametrize("py", nbs.discover(), ids=lambda p: p.stem)
def test_every_notebook_derives_its_place_defaults(py):
    """Where a notebook runs comes from the runner in one `harness` parameter, resolved by `session(...)` right
    after the parameters cell; no notebook keeps an endpoint, a hard-coded loopback URL or a cwd-relative out_dir."""
    text = py.read_text()
    params = text.split('# %% tags=["parameters"]', 1)[1].split("\n# %%", 1)[0]
    assigned = dict(re.findall(r"^(\w+) = (.*?)\s*(?:#.*)?$", params, re.M))
    assert assigned.get("harness") == "{}", f"{py.name}: the parameters cell must declare harness = {{}}"
    assert not (ENDPOINT_PARAMS | {"place", "out_dir"}) & set(assigned), f"{py.name}: {sorted(assigned)}"
    after = text.split('# %% tags=["parameters"]', 1)[1].split("\n# %%", 2)[1]
    assert f'session("{py.name.split("_", 1)[0]}", globals())' in after, f"{py.name}: first cell must resolve the place"


def test_in_process_rows_at_node_say_when_they_missed_the_gpu(tmp_path):
    """Here (no CUDA) the node's in-process rows fall back to the CPU, and the notebook's not-run table says so."""
    from servelab.lab.places import in_process_note, in_process_provider
    from servelab.lab.step import Step

    assert in_process_provider("local") == "cpu"
    assert in_process_provider("node") == in_process_provider("node", "torch") == "cpu"  # no GPU on this machine
    step = Step("98", tmp_path / "run", "node")
    in_process_note(step, "local", "cpu", "rows")
    in_process_note(step, "node", "cuda", "rows")
    assert step._not_run == []
    in_process_note(step, "node", "cpu", "the op-type profile")
    [entry] = step._not_run
    assert entry["not run"] == "the op-type profile on the node's GPU" and "CPU" in entry["why"]
    assert entry["place"] == "node"


def test_one_endpoint_can_live_on_another_machine(no_place_env, monkeypatch):
    """Service on one machine, Triton on another: SERVELAB_NODE_<NAME>_HOST moves that endpoint alone."""
    from servelab.lab.places import node_endpoints

    monkeypatch.setenv("SERVELAB_NODE_HOST", "10.0.0.1")
    monkeypatch.setenv("SERVELAB_NODE_TRITON_HTTP_HOST", "10.0.0.2")
    monkeypatch.setenv("SERVELAB_NODE_TRITON_GRPC_HOST", "10.0.0.2")
    monkeypatch.setenv("SERVELAB_NODE_TRITON_GRPC_PORT", "9001")
    ep = node_endpoints()
    assert ep.service_url == f"http://10.0.0.1:{NODE_PORTS['service']}"
    assert ep.triton_http_url == f"http://10.0.0.2:{NODE_PORTS['triton_http']}"
    assert ep.triton_grpc_url == "10.0.0.2:9001"
    assert ep.triton_metrics_url == f"http://10.0.0.1:{NODE_PORTS['triton_metrics']}/metrics"


def test_lab_run_defaults_to_servelab_place(no_place_env, monkeypatch, tmp_path):
    """`servelab lab run` in the node's JupyterLab (SERVELAB_PLACE=node) plans a node run without --place."""
    from typer.testing import CliRunner

    from servelab.lab.cli import app
    from servelab.lab.runner import plan

    assert plan(profile="smoke", only=["01"], results_dir=tmp_path).place == "local"
    monkeypatch.setenv("SERVELAB_PLACE", "node")
    p = plan(profile="smoke", only=["01"], results_dir=tmp_path)
    assert p.place == "node" and p.values["service_url"] == f"http://127.0.0.1:{NODE_PORTS['service']}"
    assert plan(profile="smoke", only=["01"], place="local", results_dir=tmp_path).place == "local"  # flag wins
    monkeypatch.setenv("SERVELAB_PLACE", "gpu")  # the CLI reads it too: a bad value is named before anything runs
    out = CliRunner().invoke(app, ["run", "--profile", "smoke", "--only", "01", "--results", str(tmp_path)])
    assert out.exit_code != 0 and "place must be one of local, node, got 'gpu'" in str(out.exception or out.output)
