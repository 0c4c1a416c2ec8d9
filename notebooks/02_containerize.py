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
# # 02 · Containerize
#
# A container fixes the serving environment: base image, Python packages, the model files, the user it
# runs as, and how the platform knows it is healthy. servelab ships:
#
# - `docker/Dockerfile` — the CPU service (slim Python base, non-root user, `HEALTHCHECK` on `/healthz`,
#   model mounted or exported at build, never downloaded at run time);
# - `docker/Dockerfile.gpu` — CUDA runtime base with onnxruntime-gpu and CUDA torch;
# - `docker/compose.<step>.yaml` — one stack per lab step, GPUs requested with
#   `deploy.resources.reservations.devices`, ports bound to the node's loopback.
#
# Building and running images needs a Docker engine, which this machine does not have. What *can* be done
# here is to validate every file the way the engine would read it: compose files against the compose
# specification, Dockerfiles for pinned bases, non-root user, health check and existing `COPY` sources.

# %% tags=["parameters"]
target = "local"          # local | gpu
out_dir = "../results/interactive"

# %%
import shutil

import pandas as pd

from servelab.lab.nb import Step, run_checks, show_commands
from servelab.provision import available_stacks, compose_file, stack_ports

step = Step("02", out_dir, target)

# %% [markdown]
# ## The stacks and the ports they publish on the node

# %%
stacks = step.table(pd.DataFrame([{"stack": s, "file": compose_file(s).name, "node ports": ", ".join(map(str, stack_ports(s)))}
                                  for s in available_stacks()]), "stacks", "Compose stacks (docker/compose.*.yaml)")

# %% [markdown]
# ## Validate the Dockerfiles and compose files (runs here, no engine needed)
# These are the repository's own offline checks (`tests/deploy`), run here and summarised.

# %%
checks = step.table(run_checks("tests/deploy/test_deploy_compose.py", "tests/deploy/test_deploy_dockerfiles.py"),
                    "validation", "Offline validation of docker/ (compose specification, Dockerfile rules)")

# %% [markdown]
# ## Build and run (on a machine with Docker — the GPU node)

# %%
show_commands("node",
              "docker compose -f docker/compose.00-prepare.yaml run --rm prepare     # export + stage, once",
              "docker compose -f docker/compose.02-service-cpu.yaml up -d --build",
              "docker compose -f docker/compose.02-service-cpu.yaml ps                # health: healthy",
              f"curl -s http://127.0.0.1:{stack_ports('02-service-cpu')[0]}/healthz")
engine = shutil.which("docker") and shutil.os.path.exists("/var/run/docker.sock")
if not engine:
    step.not_run("docker build and docker compose up", "no Docker engine on this machine",
                 "every compose file and Dockerfile validated offline")

# %%
n_ok = int((checks["outcome"] == "passed").sum())
bad = checks[checks["outcome"].isin(["failed", "error"])]
step.shows(f"{len(stacks)} compose stacks are defined; {n_ok} of {len(checks)} offline checks passed"
           + (f", {len(bad)} failed ({', '.join(bad['check'].head(3))})." if len(bad) else
              f" ({int((checks['outcome'] == 'skipped').sum())} skipped with a reason).")
           + ("" if engine else " No image was built or started here: there is no Docker engine."))
