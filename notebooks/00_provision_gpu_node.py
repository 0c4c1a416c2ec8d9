# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#   kernelspec:
#     display_name: servelab (.venv)
#     language: python
#     name: servelab
# ---

# %% [markdown]
# # 00 · Provision a GPU node
#
# Stuck? [When something goes wrong](../docs/TROUBLESHOOTING.md); how a figure is read:
# [How this lab reads a measurement](../docs/METHOD.md).
#
# **After this notebook you can**
# - reserve a bare-metal GPU node on Chameleon Cloud with python-chi (lease → server → floating IP) and say
#   what each call does and what it costs;
# - tell which provisioning steps create billable or scarce resources, and why each one must be idempotent;
# - bring up a lab stack on the node and reach it from your laptop through an SSH tunnel.
#
# ```mermaid
# flowchart LR
#   subgraph LAPTOP[your laptop / this machine]
#     NB[this notebook<br/>python-chi]
#     LAB[servelab lab run --place node]
#   end
#   subgraph CHI[Chameleon site, e.g. CHI@UC]
#     L[lease<br/>1 × GPU node, hours] --> S[server<br/>CC-Ubuntu24.04-CUDA]
#     S --> IP[floating IP]
#     subgraph NODE[GPU node]
#       D[Docker + NVIDIA<br/>container toolkit] --> ST[compose stack<br/>Triton :8000-8002, service]
#     end
#     S --- NODE
#   end
#   NB -->|1 lease, 2 server, 3 IP| L
#   NB -->|4 ssh: bootstrap| NODE
#   LAB -->|ssh -L tunnel| ST
# ```
#
# The later notebooks run on this machine's CPU (`place=local`) or against servers on a leased GPU node
# (`place=node`). This notebook gets such a node on **Chameleon Cloud** with python-chi: a lease for one
# GPU bare-metal node, a server on it, a floating IP, then Docker and the NVIDIA container toolkit, a clone
# of this repository, and the compose stacks the lab needs.
#
# Every step is idempotent — rerunning resumes instead of creating a second lease. With `dry_run=True`
# (the default, and what `make lab` uses) nothing is contacted: the parameters are validated and the plan
# is printed. Set `dry_run=False` with your project, key pair and repository URL to do it for real
# (needs `pip install -r requirements-chameleon.txt` and Chameleon credentials in the environment).
#
# **Vast.ai** is the documented alternative (`scripts/VASTAI.md`): a Vast instance is itself a container (the
# compose stacks do not apply), started in SSH mode with no published port. Triton is never published (its model
# control loads code): an SSH tunnel brings its ports and the service's to this machine's loopback, and
# `--place node` uses them there.

# %% tags=["parameters"]
harness = {}              # where this runs: filled by `servelab lab run` ({}: this place's defaults)
dry_run = True
project = ""              # e.g. CHI-123456 (or SERVELAB_CHI_PROJECT / OS_PROJECT_NAME)
site = "CHI@UC"
node_type = "gpu_rtx_6000"
key_name = ""             # SSH key pair registered at the site
repo_url = ""             # the git URL the node clones
stacks = ["06a-all-backends", "jupyter"]  # service :8080 + Triton :8000-8002 (a full run needs both) + JupyterLab

# %%
from servelab.lab.session import session

lab = session("00", globals())  # endpoints, model names, results folder and load profile of this run

# %%
import pandas as pd

from servelab.lab.step import show_commands

step = lab.step

# %% [markdown]
# ## The plan
# **Predict first.** Before reading the plan: which steps create something that is billed or scarce (and
# so must never be created twice), and what should happen when the notebook runs a second time after an
# interruption halfway through?
#
# In a dry run, missing identity fields get obvious example values so the rest can be validated.

# %%
from servelab.provision import NodeSpec, provision

example = dry_run and not (project and key_name and repo_url)
spec = NodeSpec.from_env(project=project or "CHI-000000", site=site, node_type=node_type,
                         key_name=key_name or "example-key",
                         repo_url=repo_url or "https://github.com/example/servelab.git", stacks=tuple(stacks))
result = provision(spec, dry_run=dry_run)
print(result.text() if dry_run else result)

# %%
if dry_run:
    plan = step.table(pd.DataFrame([{"step": i, "name": s.name, "what it does": s.detail}
                                    for i, s in enumerate(result.steps, 1)]), "plan", "Provisioning plan (dry run)")
    step.not_run("Chameleon lease, server, floating IP and node bootstrap",
                 "dry_run=True: nothing was contacted" + (" (example project, key and repository)" if example else ""),
                 "parameters validated and the plan printed; rerun with dry_run=False and your project")

# %%
from servelab.provision import make_plan

plan_steps = make_plan(spec).steps  # the same plan, whether or not it was just run
scarce = [s for s in plan_steps if s.name in ("lease", "server", "floating-ip")]
step.answer(f"{len(scarce)} of the {len(plan_steps)} steps claim scarce resources: "
            + "; ".join(f"**{s.name}** — {s.detail}" for s in scarce)
            + f". Each one looks its resource up by name first and reuses it, so a second run resumes where the "
              f"first stopped. The lease holds one `{spec.node_type}` for {spec.hours} h, billed in allocation hours until "
              "it ends whether or not the node computes, so release the lease when you are done.")

# %% [markdown]
# ## The python-chi calls
# What `dry_run=False` executes, read from `servelab.provision.chameleon` (python-chi is imported only
# there, and only when the plan really runs). Compare it with the Chameleon lab's own notebook: the same
# `lease` → `server.Server(...).submit(idempotent=True)` → `associate_floating_ip()` →
# `check_connectivity()` sequence, with the lease created in code instead of the Horizon web interface.

# %%
from servelab.lab.step import show_code
from servelab.provision import chameleon

show_code(chameleon.run_plan)

# %% [markdown]
# ## On the node
# After bootstrap, check the GPU from inside a container, then bring up a stack (bootstrap does this for
# `stacks`). Every port stays on the node's loopback; from this machine, an SSH tunnel forwards only what you use:
# Triton (8000-8002) and the service (8080) for `--place node` here, or JupyterLab (8888) alone to work on the node.

# %%
show_commands("node",
              "nvidia-smi",
              "docker run --rm --gpus all nvidia/cuda:13.0.2-base-ubuntu24.04 nvidia-smi -L   # the container toolkit works",
              "cd ~/servelab && docker compose -f docker/compose.06a-all-backends.yaml up -d --wait   # service + Triton")
show_commands("here",
              "ssh -N -L 8000:127.0.0.1:8000 -L 8001:127.0.0.1:8001 -L 8002:127.0.0.1:8002 -L 8080:127.0.0.1:8080 "
              "-L 8888:127.0.0.1:8888 cc@<floating-ip>",
              "servelab lab run --place node --only 04")

# %% [markdown]
# ## Compared with the source material
# The **Chameleon lab "System optimizations for serving"** reserves a 3-hour block on a `gpu_p100` node
# (two NVIDIA P100s) at CHI@TACC through the Horizon web interface, then uses python-chi from a Jupyter
# server to start a `CC-Ubuntu24.04-CUDA` server, attach a floating IP, and install Docker and the NVIDIA
# container toolkit — the steps above, automated. The **photo-dedup "Technical Deep-Dive"** rented its GPUs
# on Vast.ai instead (RTX A4000, A100 SXM4 80 GB, 4× RTX 4080): a container image and a GPU in minutes, no
# lease, billed by the hour; `scripts/VASTAI.md` describes that route for this lab. See `SOURCES.md`.
#
# This repository's own GPU reference, one H100 running the embedded stack (2026-11-26), is in
# `reference/nvidia-h100-80gb-hbm3/`; a GPU node has not run the stacks yet. Every other GPU figure in the lab is
# quoted from the write-ups or labelled emulated.

# %%
if dry_run:
    step.shows(f"The dry run validated a {len(result.steps)}-step plan for one `{spec.node_type}` node at "
               f"{spec.site} ({spec.hours} h lease) bringing up {', '.join(spec.stacks)}; no cloud resource was "
               "created" + (", and project, key pair and repository were example values." if example else "."))
else:
    step.shows(f"Provisioned {result.spec.server_name} at {result.floating_ip}: `{result.ssh_command}`.")
