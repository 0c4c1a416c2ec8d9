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
# Stuck? [When something goes wrong](../docs/TROUBLESHOOTING.md); how a figure is read:
# [How this lab reads a measurement](../docs/METHOD.md).
#
# **After this notebook you can**
# - read a Dockerfile for a model server line by line: base image, dependencies, non-root user, where the
#   model comes from, and how the platform learns the container is healthy;
# - read a compose file that runs it on a node: environment, read-only model volume, ports bound to
#   loopback (the GPU request: `docker/compose.03-service-gpu.yaml`);
# - size a health check's grace period from a measured cold start;
# - where Docker runs on your machine: build the image, start it, and read three answers apart — the
#   container *started*, the service is *alive*, the service is *ready* — and what the container costs.
#
# ```mermaid
# flowchart LR
#   subgraph NODE[GPU node: Docker engine + NVIDIA container toolkit]
#     subgraph C[container servelab:cpu / :gpu]
#       U[uvicorn :8002<br/>non-root user] --> M[ONNX Runtime session]
#       H[HEALTHCHECK<br/>python probe of /readyz] -.-> U
#     end
#     V[(artifacts/ volume<br/>model.onnx, read-only)] --> M
#     G[GPU via deploy.resources<br/>.reservations.devices] -.-> M
#   end
#   T[ssh tunnel / loopback 127.0.0.1:8002] --> U
# ```
#
# A container fixes the serving environment: base image, packages, model files, user, health check. servelab
# ships `docker/Dockerfile` (CPU), `docker/Dockerfile.gpu` (CUDA runtime, onnxruntime-gpu, CUDA torch) and one
# `docker/compose.<step>.yaml` per lab step. Every file is first validated offline; where a Docker engine
# answers, the notebook then builds the image and runs it; where none does
# ([no Docker engine](../docs/TROUBLESHOOTING.md#no-docker-engine)), it says so and the rest still runs.

# %% tags=["parameters"]
harness = {}              # where this runs: filled by `servelab lab run` ({}: this place's defaults)

# %%
from servelab.lab.session import session

lab = session("02", globals())  # endpoints, model names, results folder and load profile of this run

# %%
import pandas as pd

from servelab.lab.step import run_checks, show_commands
from servelab.provision import available_stacks, compose_file, stack_ports

step = lab.step

# %% [markdown]
# ## The Dockerfile
# Read it top to bottom: a pinned slim Python base, the service's requirements, the package, a user without
# root rights, and a `HEALTHCHECK` that runs `docker/healthcheck.py` (the slim image has no curl) against
# `/readyz`: *ready to serve*, not merely *listening*.

# %%
from servelab.lab.step import repo_path, show_code

show_code(repo_path("docker", "Dockerfile"), lang="dockerfile")

# %% [markdown]
# ## The compose file
# How the node runs that image: the weights settings the image's preflight checks, the model export mounted
# read-only (never downloaded at run time), and the port bound to the node's loopback, reached only through
# your SSH tunnel.

# %%
show_code(repo_path("docker", "compose.02-service-cpu.yaml"), lang="yaml")

# %% [markdown]
# ## The stacks and the ports they publish on the node

# %%
stacks = step.table(pd.DataFrame([{"stack": s, "file": compose_file(s).name, "node ports": ", ".join(map(str, stack_ports(s)))}
                                  for s in available_stacks()]), "stacks", "Compose stacks (docker/compose.*.yaml)")

# %% [markdown]
# ## Validate the Dockerfiles and compose files (runs here, no engine needed)
# The repository's own offline checks (`tests/deploy`), summarised.
#
# **Predict first.** Without a Docker engine, which mistakes in these files can still be caught — and which
# only show up when an image is built and started?

# %%
checks = step.table(run_checks("tests/deploy/test_deploy_compose.py", "tests/deploy/test_deploy_dockerfiles.py"),
                    "validation", "Offline validation of docker/ (compose specification, Dockerfile rules)", show=False)

# %%
outcomes = checks["outcome"].value_counts().to_dict()
problems = checks[checks["outcome"].isin(["failed", "error"])]
step.answer(f"{len(checks)} offline checks ran ({', '.join(f'{n} {k}' for k, n in outcomes.items())}); the full list is in "
            "`tables/02_validation.csv`. Caught here: compose files that break the compose specification, unpinned "
            "base images, a root user, a missing health check, `COPY` sources that do not exist. Not catchable without "
            "an engine: a package that fails to install, a CUDA/driver mismatch, a model that does not load in the "
            "image, a file the container's user cannot read — building the image and starting it (below, where an "
            "engine answers; on the node in any case) are the test for those."
            + (f" Failing now: {', '.join(problems['check'].head(3))}." if len(problems) else ""))

# %% [markdown]
# ### Exercise: the service's health check in compose
# Docker marks a container *healthy* by running its `healthcheck.test` inside it; failures during
# `start_period` do not count. `/healthz` asks *is the process alive?* (it answers once uvicorn listens),
# `/readyz` asks *can it serve?* (200 once the model has run a real batch); Docker's `healthy` should mean the
# second. How long is loading? A fresh service process is timed from start to ready three times: a health
# check must allow for the *slowest* start, not the typical one.

# %%
from servelab.bench.experiments import cold_start

# three fresh starts (one start is one sample of a noisy machine); a smoke run checks the path with one
cold = cold_start(step.run, servers=("fastapi",), repeats=1 if lab.load.quick else 3)[0]
if not cold.get("available", True) or cold.get("start_to_ready_s") is None:
    raise RuntimeError(f"could not start a service to time its cold start: {cold.get('note')}")
cold_start_s = float(cold["start_to_ready_max_s"])
print(f"service process start -> ready over {cold['repeats']} starts: median {cold['start_to_ready_s']:.1f} s, "
      f"range {cold['start_to_ready_min_s']:.1f}–{cold_start_s:.1f} s (weights: {cold['weights']})")

# %%
step.answer(f"The slowest of {cold['repeats']} fresh services took {cold_start_s:.1f} s from process start to ready on "
            "this machine: in that time it imports its packages, loads the model, creates the ONNX Runtime session and "
            "runs a warm-up batch (this run timed only their sum). The photo-dedup write-ups measured 541 ms for "
            "PyTorch and 614 ms for Triton on their GPU host, and 279 ms for creating the ONNX Runtime session alone "
            "(SOURCES.md). Without a `start_period`, every probe that fails while the model loads counts toward "
            "`retries`: a start longer than `interval` × `retries` marks a healthy container unhealthy, and the "
            "slowest start, not the median, is the one to allow for.")

# %% tags=["exercise"]
# Exercise 02.1: write the compose healthcheck for the service
def service_healthcheck(cold_start_s):
    """YAML for the compose service's `healthcheck:` mapping: a ["CMD", …] test that asks the service on its
    port (8002) inside the container whether it is ready — the slim image has Python but no curl — with
    interval, timeout and retries, and a start_period of at least 1.5 × cold_start_s."""
    # BEGIN SOLUTION
    grace_s = int(1.5 * cold_start_s) + 15
    probe = "import urllib.request as u; u.urlopen('http://127.0.0.1:8002/readyz', timeout=3)"
    return (f'healthcheck:\n  test: ["CMD", "python", "-c", "{probe}"]\n'
            f"  interval: 15s\n  timeout: 5s\n  retries: 3\n  start_period: {grace_s}s\n")
    # END SOLUTION


# %%
from servelab.assignments import checks as assignment_checks  # `checks` above is the validation table

assignment_checks.compose_healthcheck(service_healthcheck, cold_start_s=cold_start_s, port=8002,
                                      exercise="02.1", step=step)

# %% [markdown]
# ## Build the image
# Where a Docker engine answers (`docker version` reaches it), the notebook builds `docker/Dockerfile` and
# runs it the way the compose file above does.
#
# **Predict first.** The Dockerfile installs the Python packages in one layer and copies servelab's code in a
# later one. After a change to servelab's code only, what share of a build from scratch will the rebuild take?
# And of the image's size, how much is the base image, how much the packages, how much servelab's code?

# %%
from servelab.deploy.containers import base_image, build_image, engine_version, image_info, image_layers

IMAGE = "servelab:cpu-0.1.0"  # the tag docker/compose.02-service-cpu.yaml runs
engine = engine_version()
show_commands("here" if engine else "node",
              *([f"docker build --no-cache -f docker/Dockerfile -t {IMAGE}-cold . && docker image rm {IMAGE}-cold"]
                if lab.cold_build else []),
              f"docker build -f docker/Dockerfile -t {IMAGE} .",
              f"docker image ls {IMAGE}; docker history {IMAGE}")
show_commands("node",  # the same image on the GPU node, through the step's compose file
              "docker compose -f docker/compose.00-prepare.yaml run --rm prepare     # export + stage, once",
              "docker compose -f docker/compose.02-service-cpu.yaml up -d --build",
              "docker compose -f docker/compose.02-service-cpu.yaml ps                # health: healthy",
              f"curl -s http://127.0.0.1:{stack_ports('02-service-cpu')[0]}/readyz")
if not engine:
    step.not_run("building and running the service image", "no Docker engine answers on this machine "
                 "(`docker version` reached none)", "every compose file and Dockerfile validated offline above; run "
                 "the commands shown where Docker runs (Docker Desktop, Docker Engine, the GPU node)")
elif not lab.cold_build:
    step.not_run("a build from scratch (--no-cache)", "this profile keeps to seconds, and a build from scratch "
                 "downloads and installs every package again",
                 "the rebuild from the layer cache; `--param cold_build=true` adds it")

# %%
if engine:
    builds = []
    if lab.cold_build:  # from scratch under a throwaway tag, removed after: the image the lesson runs stays as it is
        builds.append(build_image(f"{IMAGE}-cold", "docker/Dockerfile", cached=False, keep=False))
    built = build_image(IMAGE, "docker/Dockerfile")
    builds.append(built)
    base = base_image("docker/Dockerfile")
    base_mb = image_info(base)["size_mb"]
    step.table(pd.DataFrame([{"build": "from the layer cache" if b.cached else "from scratch (--no-cache)",
                              "seconds": b.seconds, "image MB": b.size_mb, "base": base, "base MB": base_mb,
                              "stand-in base": b.standin or "no"} for b in builds]),
               "build", f"Building {IMAGE} from docker/Dockerfile", measured=False)
    layers = step.table(pd.DataFrame([row for row in image_layers(IMAGE, below=base) if row["size_mb"] > 0]),
                        "layers", f"The layers docker/Dockerfile adds on top of {base} (docker history)",
                        measured=False)

# %%
if engine:
    scratch = next((b for b in builds if not b.cached), None)
    packages = layers[layers["step"].str.contains("pip install")]["size_mb"].sum()
    code = layers[layers["step"].str.contains("COPY servelab")]["size_mb"].sum()
    step.answer(
        f"Rebuilding from the layer cache took {built.seconds:.1f} s"
        + (f", building from scratch {scratch.seconds:.0f} s ({scratch.seconds / built.seconds:.0f}× as long): Docker reuses "
           "a layer as long as its instruction and inputs are unchanged, so the package layer comes from the cache "
           "until docker/requirements-service.txt changes, and a code change rebuilds only the layers from "
           "`COPY servelab` on." if scratch else
           " (a build from scratch was not timed in this profile): Docker reuses a layer as long as its instruction "
           "and inputs are unchanged, so a code change rebuilds only the layers from `COPY servelab` on.")
        + f" The image is {built.size_mb:.0f} MB: the base {base_mb:.0f} MB, the packages {packages:.0f} MB, "
        f"servelab's code {code:.1f} MB; the model is not in it — it is mounted at run time."
        + (f" These sizes and times come from a stand-in base image ({built.standin}): the official {base} has "
           "another size, so only the layers the Dockerfile adds carry over to your machine." if built.standin else ""))

# %% [markdown]
# ## Run it: started, alive, ready — and Docker's `healthy`
# The container starts as the compose file runs it (export read-only at `/models`, port on loopback only).
# Every 0.1 s the notebook asks from outside: has it *started* (its process runs), is the service *alive*
# (`/healthz`), is it *ready* (`/readyz`)? Your healthcheck from exercise 02.1 runs inside the container
# (`docker exec`, as Docker does) once alive and again once ready, beside Docker's own status and probe log.
#
# **Predict first.** How many seconds after `docker run` will `/healthz` answer, and `/readyz`? When will
# `docker ps` say `healthy` — and why not at the moment `/readyz` first answers?

# %%
import atexit
import contextlib
import os
import shlex

from servelab.config import Settings
from servelab.deploy.containers import exec_healthcheck, healthcheck_command, run_args, service_container, weights_env
from servelab.model.export import ensure_exported

if engine:
    settings = Settings.from_env()
    models = os.path.dirname(ensure_exported(settings)["path"])  # the export this run serves
    env = {**weights_env(settings), "SERVELAB_ENGINE": settings.engine}  # what the bare service runs
    try:  # your healthcheck, right or wrong: the container shows what it answers
        probe = service_healthcheck(cold_start_s)
        healthcheck_command(probe)  # a test Docker could run?
        own = "your healthcheck"
    except Exception as exc:  # noqa: BLE001 - not written yet, or no test Docker could run: the image's own
        probe = {"test": ["CMD", "python", "/opt/servelab/docker/healthcheck.py"]}
        own = f"the image's own healthcheck (yours could not run: {type(exc).__name__})"
    containers = contextlib.ExitStack()
    atexit.register(containers.close)  # the container goes even when a later cell fails
    container = containers.enter_context(service_container(IMAGE, name=f"nb02-service-{step.run.run_id}",
                                                           models=models, env=env, checkpoint=settings.checkpoint))
    show_commands("here", "docker " + shlex.join(run_args(IMAGE, name=container.name, models=models,
                                                          port=container.port, env=env, checkpoint=settings.checkpoint)))
    start = container.wait_started(on_alive=lambda: exec_healthcheck(container.name, probe))
    once_ready = exec_healthcheck(container.name, probe)
    health = image_info(IMAGE)["healthcheck"]
    events = [("`docker run -d` returned", "started", start.run_s),
              ("`/healthz` answered 200", "alive", start.healthz_s),
              ("`/readyz` answered 200", "ready", start.readyz_s),
              ("Docker's status `healthy`", "ready, as Docker knows it", start.healthy_s)]
    events += [(f"Docker's HEALTHCHECK probe: exit {p['exit_code']}", "ready?", p["at_s"]) for p in start.probes]
    step.table(pd.DataFrame(sorted(events, key=lambda e: e[2] if e[2] is not None else 1e9),
                            columns=["event", "question", "seconds after docker run"]),
               "start", f"{IMAGE} from `docker run` to healthy (Docker's probe times count from the container's "
               "start, within the `docker run` call)")

# %%
if engine:
    loading = start.during_loading  # your healthcheck's run while alive but not ready (None: no such moment seen)
    after = f"once ready it exited {once_ready.exit_code}" + (" (passed)" if once_ready.passed else
                                                              f" (failed: {once_ready.output[-120:]})")
    if loading is None:
        gap = ("The model was ready by the time `/healthz` first answered: no gap between alive and ready could be "
               f"seen on this run. {own.capitalize()}: {after}. ")
    else:
        verdict = "failed, as it should: not ready yet" if not loading.passed else \
            "passed — so it does not ask whether the model can serve"
        gap = (f"For {start.readyz_s - start.healthz_s:.1f} s the service was alive but not ready: a health check on "
               f"`/healthz` would have called it healthy while it could not serve. {own.capitalize()}, run inside "
               f"the container then, exited {loading.exit_code} ({verdict}); {after}. ")
    docker_said = (f"Docker's status was `{start.status_at_ready}` when `/readyz` first answered and turned `healthy` "
                   f"at {start.healthy_s:.1f} s: its probe runs every {health['interval_s']:g} s (the image's "
                   f"`--interval`), so Docker learns of readiness up to one interval late — a `depends_on: "
                   "service_healthy` waits for that, not for the service."
                   if start.healthy_s is not None else "Docker's status was not waited for.")
    step.answer(f"The container started in {start.run_s:.1f} s, answered `/healthz` at {start.healthz_s:.1f} s and "
                f"`/readyz` at {start.readyz_s:.1f} s after `docker run` (a bare service process: median "
                f"{cold['start_to_ready_s']:.1f} s from start to ready above). " + gap + docker_said
                + (f" On the way Docker called it `unhealthy`: loading outlasted start_period {health['start_period_s']:g} s "
                   f"+ {health['retries']} retries × {health['interval_s']:g} s." if start.unhealthy_seen else "")
                + (" The container runs on a stand-in base image; its times are this machine's, not the official "
                   "image's." if built.standin else ""))

# %% [markdown]
# ## What does the container cost? The container against the bare process
# The same service code, engine and export: the lab's own service (a bare process) and the container, in
# alternating windows, one client sending one image at a time. Between the client and the container sit
# Docker's published port (a userland proxy or NAT rules) and the container's network namespace.
#
# **Predict first.** Will the container answer measurably slower than the bare process? By more or less than
# 5 %?

# %%
if engine and lab.place == "local":
    from servelab.bench.experiments import Side, ab
    from servelab.bench.report import idle_sentence
    from servelab.lab.places import attach

    bare = attach("fastapi", lab.service_url, payload="tensor", pid=lab.service_pid or None)
    boxed = attach("fastapi", container.url, payload="tensor")
    boxed_rec, bare_rec, box_ratio = ab(step.run, "02-container", Side("container", boxed), Side("process", bare),
                                        opts=lab.load)
    cost = step.frame([boxed_rec, bare_rec], "engine", "batch", "throughput_img_s", "throughput_min_img_s",
                      "throughput_max_img_s", "latency_p50_ms", "latency_p99_ms", "stable", "params.served_by")
    cost = cost.rename(columns={"params.served_by": "served by"})
    cost.insert(0, "runs as", ["container", "bare process"])
    step.table(cost, "container_vs_process", "The service in its container against the bare process (interleaved, "
               "batch 1, one client)")
elif engine:
    step.not_run("the container against the bare process", f"at place={lab.place} the bare service is the node's and the "
                 "container this machine's: the ratio would compare two machines", "run the notebook with place=local")

# %%
if engine and lab.place == "local":
    step.answer(f"p50 {bare_rec['latency_p50_ms']:.1f} ms as a bare process, {boxed_rec['latency_p50_ms']:.1f} ms in the "
                f"container ({boxed_rec['latency_p50_ms'] - bare_rec['latency_p50_ms']:+.1f} ms). "
                + step.ratio(box_ratio) + ". " + idle_sentence(box_ratio) + "."
                + (" The container runs on a stand-in base image (its Python is this machine's own CPython): the "
                   "official image's interpreter build may differ." if built.standin else ""))

# %%
if engine:
    containers.close()  # docker rm -f: the container is gone; the image stays for the next run

# %% [markdown]
# ## Compared with the source material
# The **photo-dedup "Technical Deep-Dive"** containerised the same service from `python:3.11-slim` with a
# non-root user and a `curl` health check on `/healthz`, then a CUDA image run on Vast.ai GPUs. The same shape
# here, with pinned bases and a probe of `/readyz` (the model can serve) rather than `/healthz`. The **Chameleon
# lab** runs its endpoint, a Flask front-end and a Jupyter client as three containers of one compose file on the
# P100 node. See `SOURCES.md`; the H100 reference (`reference/nvidia-h100-80gb-hbm3/`) ran the embedded stack,
# not these containers.

# %%
n_ok = int((checks["outcome"] == "passed").sum())
bad = checks[checks["outcome"].isin(["failed", "error"])]
step.shows(f"{len(stacks)} compose stacks are defined; {n_ok} of {len(checks)} offline checks passed"
           + (f", {len(bad)} failed ({', '.join(bad['check'].head(3))})." if len(bad) else
              f" ({int((checks['outcome'] == 'skipped').sum())} skipped with a reason).")
           + (" No image was built or started here: no Docker engine answered." if not engine else
              f" The image ({built.size_mb:.0f} MB{', stand-in base' if built.standin else ''}) rebuilt from the layer "
              f"cache in {built.seconds:.1f} s"
              + (f" ({scratch.seconds:.0f} s from scratch)" if scratch else "")
              + f"; its container answered /healthz {start.healthz_s:.1f} s and /readyz {start.readyz_s:.1f} s after "
              "`docker run`" + (f", Docker called it healthy at {start.healthy_s:.1f} s" if start.healthy_s else "")
              + (f"; {step.ratio(box_ratio)} (the container against the bare process)" if lab.place == "local" else "") + "."))
