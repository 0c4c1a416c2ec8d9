"""What provisioning a GPU node means, without contacting anything: the node spec (from arguments and
SERVELAB_CHI_* variables), its validation, the numbered plan, the node bootstrap command and the ports the
compose stacks publish. servelab.provision.chameleon runs a plan; `servelab.provision.provision` is the entry.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

from servelab.config import CHECKOUT, checkout
from servelab.errors import InvalidValue, ServelabError

# The node's stacks and bootstrap ship with the course repository (an installed package has none of them).
_ROOT = CHECKOUT or Path.cwd()
DOCKER_DIR = _ROOT / "docker"
BOOTSTRAP = _ROOT / "scripts" / "node_bootstrap.sh"

# Ports the stacks publish on the node's loopback (docker/compose.*.yaml); the lab's `node` place uses the same.
NODE_PORTS = {"service": 8080, "triton_http": 8000, "triton_grpc": 8001, "triton_metrics": 8002, "jupyter": 8888}

# The NVIDIA driver branch every GPU part of the lab needs: CUDA 13.0 (docker/Dockerfile.gpu, Triton 25.10).
DRIVER_FLOOR = 580

# CUDA 13 and Triton 25.10 need compute capability >= 7.5 (Turing or newer): a node type is accepted by its GPU.
MIN_COMPUTE_CAPABILITY = 7.5


@dataclass(frozen=True)
class Gpu:
    name: str
    compute_capability: float | None  # None: not an NVIDIA GPU, no CUDA at all


# GPUs by the word Chameleon's node types use for them: gpu_<gpu>[_<form factor>] (gpu_a100_pcie, gpu_rtx_6000).
GPUS = {
    "k80": Gpu("K80", 3.7), "m40": Gpu("M40", 5.2), "p100": Gpu("P100", 6.0), "v100": Gpu("V100", 7.0),
    "t4": Gpu("T4", 7.5), "rtx_6000": Gpu("Quadro RTX 6000", 7.5), "rtx_8000": Gpu("Quadro RTX 8000", 7.5),
    "a100": Gpu("A100", 8.0), "a30": Gpu("A30", 8.0), "a10": Gpu("A10", 8.6), "a40": Gpu("A40", 8.6),
    "l4": Gpu("L4", 8.9), "l40": Gpu("L40", 8.9), "l40s": Gpu("L40S", 8.9),
    "h100": Gpu("H100", 9.0), "h200": Gpu("H200", 9.0), "gh200": Gpu("GH200", 9.0), "b200": Gpu("B200", 10.0),
    "mi100": Gpu("AMD MI100", None), "mi210": Gpu("AMD MI210", None),
}
# Node types named after the machine rather than the GPU (composable-GPU nodes, A100 PCIe at CHI@TACC and CHI@UC).
MACHINE_NODE_TYPES = {"compute_liqid": "a100", "compute_gigaio": "a100"}


def node_gpu(node_type: str) -> Gpu | None:
    """The GPU a Chameleon node type carries, read from its name; None when the name names no known GPU."""
    word = MACHINE_NODE_TYPES.get(node_type)
    if word is None and node_type.startswith("gpu_"):
        rest = node_type[len("gpu_"):]
        word = next((w for w in sorted(GPUS, key=len, reverse=True) if rest == w or rest.startswith(w + "_")), None)
    return GPUS.get(word) if word else None


def runs_the_stack(gpu: Gpu | None) -> bool:
    return gpu is not None and (gpu.compute_capability or 0) >= MIN_COMPUTE_CAPABILITY


ENV = {  # field -> environment variable
    "project": "SERVELAB_CHI_PROJECT",
    "site": "SERVELAB_CHI_SITE",
    "node_type": "SERVELAB_CHI_NODE_TYPE",
    "lease_name": "SERVELAB_CHI_LEASE",
    "server_name": "SERVELAB_CHI_SERVER",
    "key_name": "SERVELAB_CHI_KEY",
    "private_key": "SERVELAB_CHI_PRIVATE_KEY",
    "image": "SERVELAB_CHI_IMAGE",
    "hours": "SERVELAB_CHI_HOURS",
    "repo_url": "SERVELAB_REPO_URL",
    "repo_ref": "SERVELAB_REPO_REF",
    "stacks": "SERVELAB_STACKS",
    "instances": "SERVELAB_INSTANCES",
    "pretrained": "SERVELAB_PRETRAINED",
}


class ProvisionError(ServelabError, RuntimeError):
    """A cloud step failed; the message names the step and what to do."""


@dataclass(frozen=True)
class NodeSpec:
    project: str = ""
    site: str = "CHI@UC"
    node_type: str = "gpu_rtx_6000"
    lease_name: str = "servelab-gpu"
    server_name: str = ""  # default: <lease_name>-node
    key_name: str = ""
    private_key: str = ""  # path to the private key for SSH (python-chi's keypair_private_key); optional
    image: str = "CC-Ubuntu24.04-CUDA"
    hours: int = 4
    repo_url: str = ""
    repo_ref: str = "main"
    # a full lab run at the node needs the service (8080) and Triton (8000-8002): 06a's stack has both; JupyterLab
    stacks: tuple[str, ...] = ("06a-all-backends", "jupyter")
    instances: int = 1  # Triton encoder instances per GPU (compose.00-prepare.yaml)
    pretrained: str = ""  # open_clip pretrained tag for every container on the node; "" = random-init
    ssh_user: str = "cc"
    remote_dir: str = "servelab"

    @classmethod
    def from_env(cls, **overrides) -> NodeSpec:
        values = {}
        for name, var in ENV.items():
            raw = os.environ.get(var)
            if raw:
                values[name] = raw
        if "project" not in values and os.environ.get("OS_PROJECT_NAME"):
            values["project"] = os.environ["OS_PROJECT_NAME"]
        values.update({k: v for k, v in overrides.items() if v is not None})
        unknown = set(values) - {f.name for f in fields(cls)}
        if unknown:
            raise InvalidValue(f"unknown provisioning parameter(s): {', '.join(sorted(unknown))}")
        for name in ("hours", "instances"):
            if name in values:
                try:
                    values[name] = int(values[name])
                except (TypeError, ValueError):
                    raise InvalidValue(f"{name} must be an integer, got {values[name]!r}") from None
        if isinstance(values.get("stacks"), str):
            values["stacks"] = tuple(s.strip() for s in values["stacks"].split(",") if s.strip())
        elif "stacks" in values:
            values["stacks"] = tuple(values["stacks"])
        spec = cls(**values)
        if not spec.server_name:
            spec = replace(spec, server_name=f"{spec.lease_name}-node")
        return spec

    def problems(self) -> list[str]:
        """Every reason this spec cannot be provisioned (empty list = valid). Touches no network."""
        p = []
        if not self.project:
            p.append("project is required (SERVELAB_CHI_PROJECT or OS_PROJECT_NAME, e.g. CHI-123456)")
        if re.fullmatch(r"KVM@[A-Za-z]+", self.site or ""):
            p.append(f"site {self.site!r} is a KVM (virtual machine) site: bare-metal GPU node reservations need a "
                     "CHI@ site such as CHI@UC or CHI@TACC")
        elif not re.fullmatch(r"CHI@[A-Za-z]+", self.site or ""):
            p.append(f"site {self.site!r} is not a Chameleon bare-metal site name such as CHI@UC, CHI@TACC")
        gpu = node_gpu(self.node_type)
        if gpu is None:
            p.append(f"node_type {self.node_type!r} is not a GPU node type known to run this stack: use a gpu_<gpu> "
                     f"type whose GPU has compute capability >= {MIN_COMPUTE_CAPABILITY} (gpu_rtx_6000, gpu_a100_pcie, "
                     "gpu_a100_nvlink, gpu_h100_…), or add its GPU to servelab.provision.plan.GPUS")
        elif not runs_the_stack(gpu):
            why = "no CUDA at all" if gpu.compute_capability is None else f"compute capability {gpu.compute_capability}"
            p.append(f"node_type {self.node_type!r} cannot run this stack ({gpu.name}, {why}; CUDA 13 / Triton 25.10 "
                     f"need compute capability >= {MIN_COMPUTE_CAPABILITY}): use a newer GPU type such as "
                     "gpu_rtx_6000 or gpu_a100_pcie")
        for name in ("lease_name", "server_name"):
            if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}", getattr(self, name) or ""):
                p.append(f"{name} {getattr(self, name)!r}: use letters, digits, '-', '_', '.' (max 63)")
        if not self.key_name:
            p.append("key_name is required: the name of an SSH key pair registered at the site (SERVELAB_CHI_KEY)")
        if self.private_key and not Path(self.private_key).expanduser().is_file():
            p.append(f"private_key {self.private_key}: no such file")
        if not 1 <= int(self.hours) <= 168:
            p.append(f"hours must be 1..168 (Chameleon leases last at most 7 days), got {self.hours}")
        if not re.fullmatch(r"(https://|git@|ssh://)\S+", self.repo_url or ""):
            p.append("repo_url is required: the git URL the node clones (https://… or git@…; SERVELAB_REPO_URL)")
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_./-]*", self.repo_ref or ""):
            p.append(f"repo_ref {self.repo_ref!r} is not a branch, tag or commit")
        if not 1 <= int(self.instances) <= 16:
            p.append(f"instances must be 1..16 (Triton encoder instances per GPU), got {self.instances}")
        if self.pretrained and not re.fullmatch(r"[A-Za-z0-9_.-]+", self.pretrained):
            p.append(f"pretrained {self.pretrained!r} is not an open_clip pretrained tag such as laion2b_s34b_b79k")
        seen: dict[int, str] = {}
        for stack in self.stacks:
            if stack not in available_stacks():
                have = ", ".join(available_stacks())
                p.append(f"stack {stack!r}: no docker/compose.{stack}.yaml to bring up (have: {have})")
                continue
            for port in stack_ports(stack):
                if port in seen:
                    p.append(f"stacks {seen[port]!r} and {stack!r} both publish port {port}: bring up one of them")
                seen.setdefault(port, stack)
        if CHECKOUT is None:
            p.append("provisioning uploads docker/ and scripts/ from the course repository: run it from a clone")
        elif not BOOTSTRAP.is_file():
            p.append(f"{BOOTSTRAP} is missing")
        return p

    def validate(self) -> NodeSpec:
        problems = self.problems()
        if problems:
            raise InvalidValue("invalid provisioning parameters: " + "; ".join(problems))
        return self

    def as_dict(self) -> dict:
        d = asdict(self)
        d["stacks"] = list(self.stacks)
        return d


def compose_file(stack: str) -> Path:
    return DOCKER_DIR / f"compose.{stack}.yaml"


# Compose files that are run one-shot (`docker compose run --rm …`), not brought up as a stack.
RUN_ONLY = ("00-prepare", "perf-analyzer")


def available_stacks() -> list[str]:
    """Stack names that can be brought up with `docker compose up -d`."""
    names = sorted(p.name[len("compose."):-len(".yaml")] for p in DOCKER_DIR.glob("compose.*.yaml"))
    return [n for n in names if n not in RUN_ONLY]


def stack_ports(stack: str) -> list[int]:
    """Node ports a stack occupies: published ports, plus the known listeners of host-network services."""
    from servelab.provision.compose import load, published_ports

    doc = load(compose_file(stack), env={"JUPYTER_TOKEN": "x", "SERVELAB_TRITON_KEY": "x"})  # required values, unread here
    ports = set(published_ports(doc))
    if any(s.get("network_mode") == "host" and "jupyter" in name for name, s in doc["services"].items()):
        ports.add(NODE_PORTS["jupyter"])
    return sorted(ports)


def bootstrap_env(spec: NodeSpec) -> dict[str, str]:
    """Variables scripts/node_bootstrap.sh reads on the node."""
    return {
        "REPO_URL": spec.repo_url,
        "REPO_REF": spec.repo_ref,
        "REMOTE_DIR": spec.remote_dir,
        "STACKS": " ".join(spec.stacks),
        "SERVELAB_INSTANCES": str(spec.instances),
        "SERVELAB_PRETRAINED": spec.pretrained,
    }


def bootstrap_command(spec: NodeSpec, script_path: str = "servelab_bootstrap.sh") -> str:
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in bootstrap_env(spec).items())
    return f"env {env} bash {shlex.quote(script_path)}"


@dataclass
class Step:
    name: str
    detail: str


@dataclass
class Plan:
    spec: NodeSpec
    steps: list[Step] = field(default_factory=list)
    dry_run: bool = True

    def text(self) -> str:
        head = "DRY RUN — nothing contacted; " if self.dry_run else ""
        lines = [f"{head}plan for {self.spec.server_name} ({self.spec.node_type}) at {self.spec.site}, "
                 f"project {self.spec.project}:"]
        lines += [f"  {i}. {s.name}: {s.detail}" for i, s in enumerate(self.steps, 1)]
        return "\n".join(lines)


@dataclass
class Node:
    spec: NodeSpec
    floating_ip: str
    server_id: str = ""
    lease_id: str = ""

    @property
    def ssh_command(self) -> str:
        key = f"-i {shlex.quote(self.spec.private_key)} " if self.spec.private_key else ""
        return f"ssh {key}{self.spec.ssh_user}@{self.floating_ip}"

    @property
    def tunnel_command(self) -> str:
        """One SSH tunnel for every port the stacks publish on the node's loopback."""
        fwd = " ".join(f"-L {p}:127.0.0.1:{p}" for p in sorted(NODE_PORTS.values()))
        key = f"-i {shlex.quote(self.spec.private_key)} " if self.spec.private_key else ""
        return f"ssh -N {key}{fwd} {self.spec.ssh_user}@{self.floating_ip}"


def make_plan(spec: NodeSpec, dry_run: bool = True) -> Plan:
    spec.validate()
    s = spec
    steps = [
        Step("context", f"chi.use_site({s.site!r}); chi.set('project_name', {s.project!r})"),
        Step("lease", f"reuse lease {s.lease_name!r} if present and not terminated, else create it: 1 x "
                      f"{s.node_type} for {s.hours} h; wait until ACTIVE"),
        Step("server", f"submit server {s.server_name!r} (image {s.image}, key pair {s.key_name}) on the lease's "
                       "node reservation, idempotent; wait until ACTIVE (a lease or server in ERROR stops here, "
                       "with its reason)"),
        Step("floating-ip", "attach a floating IP unless the server has one"),
        Step("ssh", f"wait until {s.ssh_user}@<floating-ip>:22 answers"),
        Step("bootstrap", f"upload {BOOTSTRAP.relative_to(checkout())} and run: {bootstrap_command(s)}"),
    ]
    steps += [Step("prepare", "docker compose -f docker/compose.00-prepare.yaml run --rm prepare "
                              f"(export + stage the GPU Triton repository: {s.instances} instance(s) per GPU, weights "
                              f"{('pretrained ' + s.pretrained) if s.pretrained else 'random-init'})")]
    steps += [Step("stack", f"docker compose -f docker/compose.{st}.yaml up -d --build --wait") for st in s.stacks]
    steps += [Step("use", "ssh tunnel: ssh -N " + " ".join(f"-L {p}:127.0.0.1:{p}" for p in sorted(NODE_PORTS.values()))
                   + f" {s.ssh_user}@<floating-ip>; then `servelab lab run --place node` here")]
    return Plan(spec=spec, steps=steps, dry_run=dry_run)
