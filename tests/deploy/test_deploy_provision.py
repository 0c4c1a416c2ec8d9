"""servelab.provision: dry_run validates and plans without python-chi or network; bad parameters are named;
the node bootstrap script parses; the CLI wrapper answers with one line and exit 1 on bad input."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys

import pytest

from servelab.provision import NODE_PORTS, NodeSpec, ProvisionError, available_stacks, provision, stack_ports
from tests.deploy.conftest import REPO_ROOT

GOOD = dict(project="CHI-123456", key_name="lab-key", repo_url="https://example.org/servelab.git")


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    for var in list(os.environ):
        if var.startswith(("SERVELAB_CHI_", "SERVELAB_REPO_", "SERVELAB_STACKS", "SERVELAB_INSTANCES",
                           "SERVELAB_PRETRAINED", "OS_PROJECT_NAME")):
            monkeypatch.delenv(var)


def test_dry_run_plans_every_step():
    plan = provision(NodeSpec.from_env(**GOOD, stacks="04-triton,jupyter", instances=2,
                                       pretrained="laion2b_s34b_b79k"), dry_run=True)
    names = [s.name for s in plan.steps]
    assert names[:6] == ["context", "lease", "server", "floating-ip", "ssh", "bootstrap"]
    assert names.count("stack") == 2 and "prepare" in names
    text = plan.text()
    assert text.startswith("DRY RUN") and "CHI-123456" in text and "gpu_rtx_6000" in text
    assert "docker/compose.04-triton.yaml" in text and "SERVELAB_INSTANCES=2" in text
    assert "SERVELAB_PRETRAINED=laion2b_s34b_b79k" in text  # the weights reach the node's containers
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
    (dict(instances=0), "instances must be 1..16"),
    (dict(site="KVM@TACC"), "KVM .*bare-metal GPU node reservations need a CHI@ site"),
    (dict(node_type="gpu_v100"), "cannot run this stack .*compute capability 7.0"),
    (dict(node_type="gpu_p100"), "cannot run this stack .*compute capability 6.0"),
    (dict(node_type="gpu_mi100"), "cannot run this stack .*no CUDA"),
    (dict(node_type="compute_skylake"), "not a GPU node type known to run this stack"),
    (dict(node_type="gpu_a100x"), "not a GPU node type known to run this stack"),
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


@pytest.mark.parametrize("node_type", ["gpu_rtx_6000", "gpu_a100_pcie", "gpu_a100_nvlink", "compute_liqid",
                                       "compute_gigaio", "gpu_h100", "gpu_h100_pcie", "gpu_h100_nvlink", "gpu_l40s"])
def test_node_types_are_accepted_by_their_gpu(node_type):
    """Any type whose GPU has compute capability >= 7.5 is accepted (Chameleon's other A100 types, any H100)."""
    from servelab.provision.plan import MIN_COMPUTE_CAPABILITY, node_gpu

    assert node_gpu(node_type).compute_capability >= MIN_COMPUTE_CAPABILITY
    NodeSpec.from_env(**GOOD, node_type=node_type).validate()


@pytest.mark.parametrize("node_type,gpu", [("gpu_v100_nvlink", "V100"), ("gpu_p100_nvlink", "P100"),
                                           ("gpu_k80", "K80"), ("gpu_m40", "M40"), ("gpu_mi100", "AMD MI100")])
def test_node_types_with_an_older_gpu_are_refused_by_name(node_type, gpu):
    with pytest.raises(ValueError, match=f"node_type '{node_type}' cannot run this stack \\({gpu}, "):
        NodeSpec.from_env(**GOOD, node_type=node_type).validate()


def test_default_node_type_runs_the_stack():
    from servelab.provision.plan import node_gpu, runs_the_stack

    assert runs_the_stack(node_gpu(NodeSpec().node_type))
    assert node_gpu("gpu_a100x") is None and node_gpu("compute_cascadelake") is None


# --- python-chi 1.2.10, as it really behaves, standing in for the cloud ------------------------------------------
# Shapes read from python-chi 1.2.10's chi/lease.py and chi/server.py: Lease and Server carry `status` only (no
# reason attribute); a lease Blazar refuses is only *logged* by create_lease(), which returns None, after which
# Lease.submit raises ResourceError("Unable to make lease"); the reasons live in Blazar's lease JSON (events,
# reservations, degraded) and in Nova's server `fault`, reached through chi.blazar() and chi.nova().
FAKE_CHI = '''
import json, os
from types import SimpleNamespace
STATE = json.loads(os.environ["FAKE_CHI_STATE"])
def use_site(site): pass
def set(key, value): pass
def blazar():
    return SimpleNamespace(lease=SimpleNamespace(get=lambda lease_id: STATE["lease"].get("blazar", {})))
def nova():
    fault = STATE["server"].get("fault")
    server = SimpleNamespace(id="srv-1", status=STATE["server"]["status"], **({"fault": fault} if fault else {}))
    return SimpleNamespace(servers=SimpleNamespace(get=lambda server_id: server))
'''
FAKE_LEASE = '''
import logging
from chi import STATE
LOG = logging.getLogger("chi.lease")
class ResourceError(Exception): pass
class Lease:
    def __init__(self, name, start_date=None, end_date=None, duration=None, lease_json=None):
        self.name, self.id, self._status = name, None, None
        self.node_reservations = []
    def add_node_reservation(self, amount=None, node_type=None, **kw): pass
    def submit(self, wait_for_active=True, wait_timeout=300, show=None, idempotent=False, retry_on_error=False):
        if STATE["lease"].get("refused"):      # create_lease(): LOG.error(...) and return None
            LOG.error(STATE["lease"]["refused"])
            raise ResourceError(ResourceError("Unable to make lease"))
        self.id, self._status = "lease-1", STATE["lease"]["status"]   # wait() returns on ACTIVE or ERROR alike
        self.node_reservations = [{"id": "res-1", "resource_type": "physical:host"}]
    @property
    def status(self):
        return self._status
'''
FAKE_SERVER = '''
from chi import STATE
class Server:
    def __init__(self, name, reservation_id=None, image_name=None, image=None, flavor_name="baremetal",
                 key_name=None, keypair=None, network_name="sharednet1"):
        self.name, self.id, self._status = name, None, None
    def submit(self, wait_for_active=True, show="widget", idempotent=False, retry_on_error=False,
               wait_timeout=1200, **kwargs):
        self.id, self._status = "srv-1", STATE["server"]["status"]   # a new server: returns None
    @property
    def status(self):
        return self._status
    def get_floating_ip(self): return None
'''


def _run_with_fake_chi(tmp_path, state):
    pkg = tmp_path / "chi"
    pkg.mkdir(exist_ok=True)
    (pkg / "__init__.py").write_text(FAKE_CHI)
    (pkg / "lease.py").write_text(FAKE_LEASE)
    (pkg / "server.py").write_text(FAKE_SERVER)
    code = ("from servelab.provision import NodeSpec, ProvisionError, provision\n"
            f"spec = NodeSpec.from_env(**{GOOD!r})\n"
            "try:\n    provision(spec, log_fn=lambda *_: None)\nexcept ProvisionError as exc:\n    print(exc)\n")
    import json

    env = {**os.environ, "PYTHONPATH": f"{tmp_path}:{REPO_ROOT}", "FAKE_CHI_STATE": json.dumps(state)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_lease_in_error_stops_with_blazars_reason(tmp_path):
    blazar = {"status": "ERROR", "degraded": False,
              "events": [{"event_type": "start_lease", "status": "ERROR"}, {"event_type": "end_lease", "status": "UNDONE"}],
              "reservations": [{"id": "res-1", "resource_type": "physical:host", "missing_resources": True}]}
    msg = _run_with_fake_chi(tmp_path, {"lease": {"status": "ERROR", "blazar": blazar}, "server": {"status": "ACTIVE"}})
    assert msg.startswith("lease 'servelab-gpu' is ERROR, not ACTIVE: start_lease ERROR; reservation res-1 is "
                          "missing resources"), msg


def test_lease_refused_by_blazar_stops_with_blazars_words(tmp_path):
    refusal = "There were not enough unreserved hosts to satisfy your request."
    msg = _run_with_fake_chi(tmp_path, {"lease": {"refused": refusal}, "server": {"status": "ACTIVE"}})
    assert msg.startswith(f"lease 'servelab-gpu' was refused: {refusal}"), msg
    assert "try another node type, site or start time" in msg


def test_server_in_error_stops_with_its_fault(tmp_path):
    msg = _run_with_fake_chi(tmp_path, {"lease": {"status": "ACTIVE"},
                                        "server": {"status": "ERROR", "fault": {"message": "No valid host was found",
                                                                                "code": 500}}})
    assert msg.startswith("server 'servelab-gpu-node' is ERROR, not ACTIVE: No valid host was found"), msg
    assert "the lease is reused" in msg


# --- scripts/node_bootstrap.sh against recording stand-ins for sudo, docker, nvidia-smi, … --------------------
STANDINS = {
    # sudo with Ubuntu's env_reset: the command runs with a clean environment (PATH and HOME kept)
    "sudo": '#!/bin/bash\necho "sudo $*" >> "$RECORD"\nexec env -i PATH="$PATH" HOME="$HOME" RECORD="$RECORD" "$@"\n',
    # `docker version` answers the engine's version from $RECORD.engine (default: one above the floor)
    "docker": '#!/bin/bash\nif [ "$1" = version ]; then cat "$RECORD.engine" 2>/dev/null || echo 28.3.3; exit 0; fi\n'
              'python3 -c \'import json,os,sys; print(json.dumps({"argv": sys.argv[1:], "env": {k: v '
              'for k, v in os.environ.items() if k.startswith(("SERVELAB_", "JUPYTER_"))}}))\' "$@" >> "$RECORD.docker"\n',
    "nvidia-smi": '#!/bin/bash\ncase "$*" in *driver_version*) echo "$FAKE_DRIVER";; *name*) echo "NVIDIA A100-PCIE-40GB";; esac\n',
    "dpkg": "#!/bin/bash\nexit 0\n",  # the container toolkit is installed
    "systemctl": '#!/bin/bash\necho "systemctl $*" >> "$RECORD"\n',
    "id": '#!/bin/bash\ncase "$1" in -u) echo 1000;; -g) echo 1000;; -un) echo cc;; *) echo cc;; esac\n',
}


def _bootstrap(tmp_path, driver="580.95.05", engine=None, **extra):
    import json

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, body in STANDINS.items():
        (bin_dir / name).write_text(body)
        (bin_dir / name).chmod(0o755)
    origin = tmp_path / "origin"
    if not origin.exists():
        subprocess.run(["git", "init", "-q", "-b", "main", str(origin)], check=True)
        (origin / "README.md").write_text("x\n")
        subprocess.run(["git", "-C", str(origin), "add", "README.md"], check=True)
        subprocess.run(["git", "-C", str(origin), "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "x"],
                       check=True)
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    daemon = tmp_path / "daemon.json"
    if not daemon.exists():
        daemon.write_text(json.dumps({"runtimes": {"nvidia": {"path": "nvidia-container-runtime", "args": []}}}))
    record = tmp_path / "record"
    if engine:
        (tmp_path / "record.engine").write_text(engine + "\n")
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(home), "RECORD": str(record), "FAKE_DRIVER": driver,
           "REPO_URL": str(origin), "REMOTE_DIR": str(tmp_path / "clone"), "STACKS": "04-triton jupyter",
           "DOCKER_DAEMON_JSON": str(daemon), **extra}
    out = subprocess.run(["bash", str(REPO_ROOT / "scripts" / "node_bootstrap.sh")], env=env, cwd=home,
                         capture_output=True, text=True, timeout=60)
    calls = [json.loads(line) for line in (tmp_path / "record.docker").read_text().splitlines()] \
        if (tmp_path / "record.docker").exists() else []
    sudo = record.read_text().splitlines() if record.exists() else []
    return out, calls, sudo, json.loads(daemon.read_text())


def test_bootstrap_passes_every_variable_through_sudo(tmp_path):
    out, calls, sudo, daemon = _bootstrap(tmp_path, SERVELAB_PRETRAINED="laion2b_s34b_b79k", SERVELAB_INSTANCES="2")
    assert out.returncode == 0, out.stdout + out.stderr
    compose = [c for c in calls if c["argv"][:1] == ["compose"] and "-f" in c["argv"] and "config" not in c["argv"]]
    files = [c["argv"][c["argv"].index("-f") + 1] for c in compose]
    assert files == ["docker/compose.00-prepare.yaml", "docker/compose.04-triton.yaml", "docker/compose.jupyter.yaml"]
    assert compose[0]["argv"][-3:] == ["run", "--rm", "prepare"]
    assert all(c["argv"][-4:] == ["up", "-d", "--build", "--wait"] for c in compose[1:])
    token = (tmp_path / "home" / ".servelab_jupyter_token").read_text()
    # JupyterLab's token reaches compose through docker/.env (this user's alone), never a command line
    assert f"JUPYTER_TOKEN={token}" in (tmp_path / "clone" / "docker" / ".env").read_text().splitlines()
    assert len(token) == 32
    for c in compose:  # what sudo's env_reset would have dropped
        e = c["env"]
        assert (e["SERVELAB_UID"], e["SERVELAB_GID"]) == ("1000", "1000"), c
        assert "JUPYTER_TOKEN" not in e
        assert e["SERVELAB_INSTANCES"] == "2"
        # the weights come from docker/.env, which compose reads itself: an empty variable here would override it
        assert "SERVELAB_PRETRAINED" not in e
    assert not [line for line in sudo if line.startswith("sudo docker")]  # always `sudo env VAR=… docker`


def test_bootstrap_writes_the_weights_once_for_every_later_command(tmp_path):
    """docker/.env holds the weights: the documented later commands (run --rm lab, 03's up, 06b's prepare) read it
    without repeating them, and a second bootstrap without weights does not reset them to random-init."""
    out, *_ = _bootstrap(tmp_path, SERVELAB_PRETRAINED="laion2b_s34b_b79k")
    assert out.returncode == 0, out.stdout + out.stderr
    env_file = tmp_path / "clone" / "docker" / ".env"
    assert "SERVELAB_PRETRAINED=laion2b_s34b_b79k" in env_file.read_text().splitlines()
    again, *_ = _bootstrap(tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "SERVELAB_PRETRAINED=laion2b_s34b_b79k" in env_file.read_text().splitlines()
    assert "weights (docker/.env): SERVELAB_PRETRAINED=laion2b_s34b_b79k" in again.stdout


def test_bootstrap_applies_the_cgroup_driver_workaround_once(tmp_path):
    out, _, sudo, daemon = _bootstrap(tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert daemon["exec-opts"] == ["native.cgroupdriver=cgroupfs"]
    assert daemon["runtimes"]["nvidia"]["path"] == "nvidia-container-runtime"  # the toolkit's entry is kept
    assert sudo.count("systemctl restart docker") == 1
    again, _, sudo2, _ = _bootstrap(tmp_path)  # idempotent: the second run changes nothing, restarts nothing
    assert again.returncode == 0 and sudo2.count("systemctl restart docker") == 1


def test_bootstrap_draws_tritons_key_into_docker_env_for_this_user_alone(tmp_path):
    out, *_ = _bootstrap(tmp_path, SERVELAB_PRETRAINED="laion2b_s34b_b79k")
    assert out.returncode == 0, out.stdout + out.stderr
    env_file = tmp_path / "clone" / "docker" / ".env"
    keys = [line for line in env_file.read_text().splitlines() if line.startswith("SERVELAB_TRITON_KEY=")]
    assert len(keys) == 1 and len(keys[0].split("=", 1)[1]) >= 40
    assert oct(env_file.stat().st_mode & 0o777) == oct(0o600)
    assert keys[0].split("=", 1)[1] not in out.stdout  # named, never printed
    again, *_ = _bootstrap(tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    text = env_file.read_text()
    assert text.count("SERVELAB_TRITON_KEY=") == 1 and keys[0] not in text  # a new key for every start
    assert "SERVELAB_PRETRAINED=laion2b_s34b_b79k" in text.splitlines()
    ignored = subprocess.run(["git", "check-ignore", "-q", "docker/.env"], cwd=REPO_ROOT)
    assert ignored.returncode == 0, "docker/.env holds the key: it must stay git-ignored"


def test_bootstrap_refuses_a_docker_engine_that_exposes_loopback_ports(tmp_path):
    """Engines before 28.0.0 let other machines of the local network reach ports published on 127.0.0.1."""
    out, calls, _, _ = _bootstrap(tmp_path, engine="20.10.24+dfsg1")
    assert out.returncode == 1
    line = [ln for ln in out.stdout.splitlines() if "20.10.24" in ln]
    assert len(line) == 1 and "older than 28.0.0" in line[0] and "docs.docker.com/engine/install" in line[0]
    assert not [c for c in calls if c["argv"][:1] == ["compose"]]
    (tmp_path / "new").mkdir()
    ok, *_ = _bootstrap(tmp_path / "new", engine="28.0.0")
    assert ok.returncode == 0, ok.stdout + ok.stderr


def test_the_rehearsal_alone_may_use_an_old_engine_and_only_on_loopback(tmp_path):
    out, calls, _, _ = _bootstrap(tmp_path, engine="20.10.24+dfsg1", SERVELAB_REHEARSAL="1")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "CPU rehearsal: Docker engine 20.10.24+dfsg1 is older than 28.0.0, allowed only because" in out.stdout
    assert [c for c in calls if c["argv"][:1] == ["compose"]]
    (tmp_path / "bind").mkdir()
    published, *_ = _bootstrap(tmp_path / "bind", engine="20.10.24+dfsg1", SERVELAB_REHEARSAL="1",
                               SERVELAB_BIND="0.0.0.0")
    assert published.returncode == 1 and "older than 28.0.0" in published.stdout


def test_bootstrap_refuses_a_driver_below_the_floor(tmp_path):
    out, calls, _, _ = _bootstrap(tmp_path, driver="575.57.08")
    assert out.returncode == 1 and "older than R580" in out.stdout and not calls


DRIVER_MENTION = re.compile(r"(?i)(?:driver|R)\s*(?:>=|≥|branch|version)?\s*(\d{3})\b")


def test_one_driver_floor_everywhere():
    """Every place that states the NVIDIA driver the stack needs states the same one."""
    from servelab.provision.plan import DRIVER_FLOOR

    sources = [*(REPO_ROOT / "docker").glob("*"), *(REPO_ROOT / "scripts").glob("*"), REPO_ROOT / "README.md",
               *(REPO_ROOT / "docs").glob("*.md"),
               *(REPO_ROOT / "k8s").rglob("*.yaml"), *(REPO_ROOT / "notebooks").glob("*.py")]
    found = {}
    for src in sources:
        if src.is_file():
            for line in src.read_text(errors="replace").splitlines():
                if "driver" in line.lower():
                    for n in DRIVER_MENTION.findall(line):
                        found.setdefault(int(n), []).append(f"{src.name}: {line.strip()[:100]}")
    assert DRIVER_FLOOR == 580 and DRIVER_FLOOR in found
    assert set(found) == {DRIVER_FLOOR}, {k: v for k, v in found.items() if k != DRIVER_FLOOR}


def test_vastai_recipe_keeps_tritons_model_control_off_the_internet():
    """Triton runs with explicit model control (loading a python-backend model runs its code): the Vast.ai recipe
    binds it to loopback (reached through SSH), restricts model control to a key drawn per start, and never maps
    its ports publicly."""
    text = (REPO_ROOT / "scripts" / "VASTAI.md").read_text()
    commands = [line for line in text.replace("\\\n", " ").splitlines() if line.startswith("tritonserver ")]
    assert commands
    for cmd in commands:
        loopback = all(f"--{p}-address=127.0.0.1" in cmd for p in ("http", "grpc", "metrics"))
        restricted = ("--http-restricted-api=$APIS:servelab-admin-key=$KEY" in cmd
                      and "--grpc-restricted-protocol=$APIS:servelab-admin-key=$KEY" in cmd)
        assert loopback and restricted, cmd
    assert "APIS=model-repository,shared-memory,logging,trace" in text and "token_urlsafe" in text
    assert not re.search(r"-p 800[012]:800[012]", text)
