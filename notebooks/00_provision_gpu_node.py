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
# **Vast.ai** is the documented alternative (`scripts/VASTAI.md`): rent a GPU instance with Docker, publish
# the ports the stacks use, and point `--place node` at it.

# %% tags=["parameters"]
place = ""                # local | node ("": $SERVELAB_PLACE, else local)
out_dir = ""              # "": results/interactive in this checkout
dry_run = True
project = ""              # e.g. CHI-123456 (or SERVELAB_CHI_PROJECT / OS_PROJECT_NAME)
site = "CHI@UC"
node_type = "gpu_rtx_6000"
key_name = ""             # SSH key pair registered at the site
repo_url = ""             # the git URL the node clones
stacks = ["04-triton"]

# %%
from servelab.lab.places import place_defaults

globals().update(place_defaults(globals()))  # "" parameters -> this place's endpoints, model names, out_dir

# %%
import pandas as pd

from servelab.lab.nb import Step, show_commands

step = Step("00", out_dir, place)

# %% [markdown]
# ## The plan
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

# %% [markdown]
# ## On the node
# After bootstrap, check the GPU from inside a container, then bring up a stack (bootstrap does this for
# `stacks`). From this machine, an SSH tunnel makes the node's ports local so `--place node` works here.

# %%
show_commands("node",
              "nvidia-smi",
              "docker run --rm --gpus all nvidia/cuda:13.0.2-base-ubuntu24.04 nvidia-smi -L   # the container toolkit works",
              "cd ~/servelab && docker compose -f docker/compose.04-triton.yaml up -d")
show_commands("here",
              "ssh -N -L 8000:127.0.0.1:8000 -L 8001:127.0.0.1:8001 -L 8002:127.0.0.1:8002 -L 8080:127.0.0.1:8080 "
              "-L 8888:127.0.0.1:8888 cc@<floating-ip>",
              "servelab lab run --place node --only 04")

# %%
if dry_run:
    step.shows(f"The dry run validated a {len(result.steps)}-step plan for one `{spec.node_type}` node at "
               f"{spec.site} ({spec.hours} h lease) bringing up {', '.join(spec.stacks)}; no cloud resource was "
               "created" + (", and project, key pair and repository were example values." if example else "."))
else:
    step.shows(f"Provisioned {result.spec.server_name} at {result.floating_ip}: `{result.ssh_command}`.")
