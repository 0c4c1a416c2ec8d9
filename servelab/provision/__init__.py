"""Provision a GPU node for the lab: Chameleon Cloud through python-chi, with a `dry_run` that contacts nothing.

    from servelab.provision import NodeSpec, provision

    spec = NodeSpec.from_env(project="CHI-123456", key_name="my-key",
                             repo_url="https://github.com/me/servelab.git")     # any field; rest from env
    plan = provision(spec, dry_run=True)     # validates, returns a Plan; imports nothing of python-chi
    print(plan.text())                       # numbered steps: lease, server, floating IP, SSH, bootstrap, stacks
    node = provision(spec)                   # the real thing (needs `pip install -r requirements-chameleon.txt`
                                             # and an OpenRC environment: OS_AUTH_URL, … from Chameleon's GUI)
    node.floating_ip, node.ssh_command, node.tunnel_command   # -> Node

What `provision` does, every step idempotent so a rerun resumes instead of duplicating:
  1. select site and project (chi.use_site, chi.set("project_name"));
  2. reuse the lease named `lease_name` if it exists and is not terminated, else create it for one node of
     `node_type` for `hours` and wait until it is ACTIVE;
  3. submit the server `server_name` on that reservation (idempotent: an existing one is reused);
  4. attach a floating IP unless it already has one;
  5. wait until SSH (port 22) answers;
  6. upload scripts/node_bootstrap.sh and run it: Docker + compose plugin + NVIDIA container toolkit, GPU
     check inside a container, clone `repo_url` at `repo_ref`, `compose.00-prepare.yaml` (export + stage the
     GPU Triton repository), then `docker compose up -d` for each stack in `stacks` (docker/compose.<step>.yaml).

Parameters come from arguments or environment (SERVELAB_CHI_* — see `ENV`), never from files in the repository:
no credentials live here. Authentication is python-chi's own (OpenRC variables / Chameleon's Jupyter).
`NodeSpec.validate()` raises ValueError naming every problem; the CLI wrapper is scripts/provision_chameleon.py.
Vast.ai, the documented alternative, is in scripts/VASTAI.md.
"""

from __future__ import annotations

from servelab.provision.chameleon import run_plan
from servelab.provision.plan import (
    BOOTSTRAP,
    ENV,
    NODE_PORTS,
    Node,
    NodeSpec,
    Plan,
    ProvisionError,
    Step,
    available_stacks,
    bootstrap_command,
    compose_file,
    make_plan,
    stack_ports,
)


def provision(spec: NodeSpec | None = None, *, dry_run: bool = False, log_fn=print, **overrides):
    """dry_run=True: validate and return the Plan (no import of python-chi, no network).
    Otherwise run the plan on Chameleon and return a Node."""
    spec = spec.validate() if spec is not None and not overrides else NodeSpec.from_env(
        **{**(spec.as_dict() if spec else {}), **overrides}).validate()
    plan = make_plan(spec, dry_run=dry_run)
    if dry_run:
        return plan
    return run_plan(plan, log_fn=log_fn)


__all__ = ["NodeSpec", "Plan", "Step", "Node", "ProvisionError", "provision", "make_plan", "NODE_PORTS",
           "available_stacks", "compose_file", "bootstrap_command", "stack_ports", "BOOTSTRAP", "ENV"]
