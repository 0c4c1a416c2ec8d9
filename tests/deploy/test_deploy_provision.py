"""servelab.provision: dry_run validates and plans without python-chi or network; bad parameters are named;
the node bootstrap script parses; the CLI wrapper answers with one line and exit 1 on bad input."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

from servelab.provision import NODE_PORTS, NodeSpec, ProvisionError, available_stacks, provision, stack_ports
from tests.deploy.conftest import REPO_ROOT

GOOD = dict(project="CHI-123456", key_name="lab-key", repo_url="https://example.org/servelab.git")


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    for var in list(os.environ):
        if var.startswith(("SERVELAB_CHI_", "SERVELAB_REPO_", "SERVELAB_STACKS", "SERVELAB_GPUS", "OS_PROJECT_NAME")):
            monkeypatch.delenv(var)


def test_dry_run_plans_every_step():
    plan = provision(NodeSpec.from_env(**GOOD, stacks="04-triton,jupyter", gpus="0,1"), dry_run=True)
    names = [s.name for s in plan.steps]
    assert names[:6] == ["context", "lease", "server", "floating-ip", "ssh", "bootstrap"]
    assert names.count("stack") == 2 and "prepare" in names
    text = plan.text()
    assert text.startswith("DRY RUN") and "CHI-123456" in text and "gpu_rtx_6000" in text
    assert "docker/compose.04-triton.yaml" in text and "SERVELAB_GPUS=0,1" in text
    for port in NODE_PORTS.values():
        assert f"-L {port}:127.0.0.1:{port}" in text


def test_dry_run_never_imports_python_chi():
    """In a fresh interpreter where importing `chi` would fail loudly, dry_run still works."""
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'chi' or name.startswith('chi.'): raise ImportError('chi imported during dry_run')\n"
        "sys.meta_path.insert(0, Block())\n"
        "from servelab.provision import NodeSpec, provision\n"
        f"p = provision(NodeSpec.from_env(**{GOOD!r}), dry_run=True)\n"
        "assert not any(m == 'chi' or m.startswith('chi.') for m in sys.modules)\n"
        "print(len(p.steps))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout.strip()) >= 8


def test_parameters_from_environment(monkeypatch):
    monkeypatch.setenv("SERVELAB_CHI_PROJECT", "CHI-999")
    monkeypatch.setenv("SERVELAB_CHI_SITE", "CHI@TACC")
    monkeypatch.setenv("SERVELAB_CHI_NODE_TYPE", "gpu_a100_pcie")
    monkeypatch.setenv("SERVELAB_CHI_HOURS", "8")
    monkeypatch.setenv("SERVELAB_CHI_KEY", "k")
    monkeypatch.setenv("SERVELAB_REPO_URL", "git@example.org:me/servelab.git")
    monkeypatch.setenv("SERVELAB_STACKS", "06b-multi-gpu")
    spec = NodeSpec.from_env(lease_name="my-lease")
    assert (spec.project, spec.site, spec.node_type, spec.hours) == ("CHI-999", "CHI@TACC", "gpu_a100_pcie", 8)
    assert spec.server_name == "my-lease-node" and spec.stacks == ("06b-multi-gpu",)
    spec.validate()


@pytest.mark.parametrize("change,message", [
    (dict(project=""), "project is required"),
    (dict(site="UC"), "site 'UC'"),
    (dict(key_name=""), "key_name is required"),
    (dict(repo_url="ftp://x"), "repo_url is required"),
    (dict(hours=500), "hours must be 1..168"),
    (dict(gpus="0;1"), "gpus '0;1'"),
    (dict(stacks="nope"), "stack 'nope'"),
    (dict(stacks="00-prepare"), "stack '00-prepare'"),
    (dict(stacks="04-triton,06a-all-backends"), "both publish port 8000"),
    (dict(private_key="/nonexistent/key"), "no such file"),
    (dict(lease_name="bad name!"), "lease_name"),
])
def test_bad_parameters_are_named(change, message):
    with pytest.raises(ValueError, match=message):
        provision(NodeSpec.from_env(**{**GOOD, **change}), dry_run=True)


def test_unknown_parameter_is_refused():
    with pytest.raises(ValueError, match="password"):
        NodeSpec.from_env(**GOOD, password="x")


def test_stack_ports_are_the_node_ports():
    assert set(stack_ports("04-triton")) == {NODE_PORTS["triton_http"], NODE_PORTS["triton_grpc"], NODE_PORTS["triton_metrics"]}
    assert stack_ports("03-service-gpu") == [NODE_PORTS["service"]]
    assert stack_ports("jupyter") == [NODE_PORTS["jupyter"]]
    assert "00-prepare" not in available_stacks() and "perf-analyzer" not in available_stacks()


@pytest.mark.skipif(importlib.util.find_spec("chi") is not None, reason="python-chi is installed here")
def test_real_run_without_python_chi_says_how_to_install():
    with pytest.raises(ProvisionError, match="requirements-chameleon.txt"):
        provision(NodeSpec.from_env(**GOOD), dry_run=False, log_fn=lambda *_: None)


def test_cli_wrapper():
    script = REPO_ROOT / "scripts" / "provision_chameleon.py"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SERVELAB_CHI_", "SERVELAB_REPO", "OS_PROJECT"))}
    ok = subprocess.run([sys.executable, str(script), "--dry-run", "--project", "CHI-1", "--key-name", "k",
                         "--repo-url", "https://example.org/s.git", "--stacks", "03-service-gpu,04-triton"],
                        capture_output=True, text=True, env=env, timeout=60)
    assert ok.returncode == 0, ok.stderr
    assert "DRY RUN" in ok.stdout and "compose.03-service-gpu.yaml" in ok.stdout
    bad = subprocess.run([sys.executable, str(script), "--dry-run"], capture_output=True, text=True, env=env, timeout=60)
    assert bad.returncode == 1 and len(bad.stderr.strip().splitlines()) == 1
    assert bad.stderr.startswith("error: ") and "project is required" in bad.stderr


def test_bootstrap_script_parses_and_needs_repo_url(tmp_path):
    script = REPO_ROOT / "scripts" / "node_bootstrap.sh"
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
    out = subprocess.run(["bash", str(script)], capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"},
                         cwd=tmp_path, timeout=30)
    assert out.returncode != 0 and "REPO_URL" in out.stderr
    text = script.read_text()
    for needle in ("nvidia-container-toolkit", "nvidia-ctk runtime configure --runtime=docker",
                   "docker/compose.00-prepare.yaml", 'docker/compose.$stack.yaml'):
        assert needle in text


def test_shell_scripts_pass_shellcheck():
    import shutil

    if not shutil.which("shellcheck"):
        pytest.skip("shellcheck not installed (apt-get install shellcheck); bash -n is checked above")
    scripts = [REPO_ROOT / "scripts" / "node_bootstrap.sh", REPO_ROOT / "docker" / "entrypoint.sh"]
    out = subprocess.run(["shellcheck", *map(str, scripts)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout
