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
# # 08 · Kubernetes
#
# Stuck on an error? [When something goes wrong](../docs/TROUBLESHOOTING.md) has the messages and their fixes.
# How a measurement is read here (windows, drift, alternating windows, and when a lead is ranked): [How this lab reads a measurement](../docs/METHOD.md).
#
# **After this notebook you can**
# - read a Deployment for a model server: replicas, resource requests and limits, and the three probes;
# - say which probe answers which question (started? can take traffic? alive?) and size the startup probe
#   from a measured cold start;
# - estimate how many replicas a load needs from a measured per-core throughput and the autoscaler's target,
#   and how many nodes the scheduler needs to hold them (requests against a node's allocatable CPU and memory).
#
# ```mermaid
# flowchart LR
#   C[clients] --> SVC[Service servelab<br/>ClusterIP :8002]
#   subgraph NS[namespace servelab · ResourceQuota]
#     SVC --> P1[pod 1<br/>ready?] & P2[pod 2<br/>ready?] & PN[pod … 6]
#     HPA[HorizontalPodAutoscaler<br/>2–6 replicas at 60 % CPU] -.->|scales| DEP[Deployment]
#     DEP --> P1 & P2 & PN
#     PDB[PodDisruptionBudget] -.->|keeps pods up<br/>during drains| DEP
#   end
#   K[kubelet] -.->|startup /readyz<br/>readiness /readyz<br/>liveness /healthz| P1
# ```
#
# Beyond one machine, the service runs as a Kubernetes **Deployment** behind a **Service**, scaled by a
# **HorizontalPodAutoscaler** (2–6 replicas, targeting 60 % of the CPU request), protected during node drains by a
# **PodDisruptionBudget**, and bounded by a **ResourceQuota**. Readiness (`/readyz`: the model is loaded)
# and liveness (`/healthz`) probes let Kubernetes route traffic only to pods that can answer. A GPU overlay
# requests `nvidia.com/gpu`. `k8s/` is a kustomize base plus overlays, for a kind cluster on the GPU node
# or a real cluster.
#
# This notebook deploys nothing: it renders the manifests and validates each against the Kubernetes API
# schema for its kind (deserialised with the official Python client's models).

# %% tags=["parameters"]
harness = {}              # where this runs: filled by `servelab lab run` ({}: this place's defaults)

# %%
from servelab.lab.session import session

lab = session("08", globals())  # endpoints, model names, results folder and load profile of this run

# %%
from servelab.lab.step import run_checks, show_commands

step = lab.step

# %% [markdown]
# ## The manifests
# The container part of the Deployment, read from `k8s/base/`: the image (with the model baked in, so a pod
# needs no volume), the service's settings, resource requests and limits, the three probes and a locked-down
# security context.

# %%
from servelab.lab.step import repo_path, show_code

show_code(repo_path("k8s", "base", "deployment.yaml"), "containers:", "volumes:", lang="yaml")

# %% [markdown]
# The autoscaler: it compares the pods' average CPU use with 60 % of what they *request* (1 CPU each) and
# adds or removes replicas between 2 and 6.

# %%
show_code(repo_path("k8s", "base", "hpa.yaml"), lang="yaml")

# %% [markdown]
# ## Validate every manifest and overlay (runs here)

# %%
checks = step.table(run_checks("tests/deploy/test_deploy_k8s.py"), "validation",
                    "Kubernetes manifests validated against the API schema (no cluster)", show=False)
outcomes = checks["outcome"].value_counts().to_dict()
print(f"{len(checks)} checks: " + ", ".join(f"{n} {k}" for k, n in outcomes.items()) + " (list: tables/08_validation.csv)")
for _, row in checks[checks["outcome"] != "passed"].iterrows():  # what did not pass, and why
    print(f"  {row['outcome']}: {row['check']}: {row['message']}")

# %% [markdown]
# ## How many replicas, on how many nodes?
# **Predict first.** Suppose the photo finder's users send 20 images per second in total. Each pod requests
# one CPU and 1 GiB, and the autoscaler adds pods until their average use is 60 % of the CPU request. From the
# throughput the service reached on this machine's cores, how many replicas will the autoscaler settle at —
# and how many nodes like this one does the scheduler need to place them?
#
# Two steps, two controllers. The **autoscaler** only counts pods, never fewer than its `minReplicas` nor more
# than its `maxReplicas`. The **scheduler** then places each pod on a node whose *allocatable* CPU and memory
# (capacity less what the kubelet keeps back) still cover the pod's requests, beside whatever else runs there —
# on a one-node kind cluster, the control plane's own pods; a pod that fits nowhere stays `Pending`, serving
# nothing. So the answer is replicas *and* nodes.

# %%
import math

import yaml

from servelab.deploy.capacity import KUBELET_EVICTION_MB, pod_shape, replica_plan

deployment = yaml.safe_load(repo_path("k8s", "base", "deployment.yaml").read_text())
container = next(c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "servelab")
deployed_engine = next(e["value"] for e in container["env"] if e["name"] == "SERVELAB_ENGINE")
# the kind cluster's nodes: with one, the control plane's pods share it with the replicas. What they request of it
# (kubeadm's static pods and CoreDNS, kind's kindnet) is quoted in notebooks/SOURCES.md
kind_nodes = yaml.safe_load(repo_path("k8s", "kind", "cluster.yaml").read_text())["nodes"]
control_plane = {"cpu": 0.95, "memory_mb": 290.0} if len(kind_nodes) == 1 else {"cpu": 0.0, "memory_mb": 0.0}
service_points = step.records(kind="load", server="fastapi", engine=deployed_engine)  # the engine the pods run
cores = float(step.environment.get("cpu_usable") or step.environment.get("cpu_logical") or 1)
shape = pod_shape(repo_path("k8s", "base"))  # requests, the HPA's target and bounds, from the manifests

# %% [markdown]
# ### Exercise: the autoscaler's count
# Write the first step: how many pods, each held at `cpu_target` (0…1) of its CPU, serve the load? The
# check gives one pod's throughput at its full request, from this run.

# %% tags=["exercise"]
# Exercise 08.2: the replicas the autoscaler needs for a load
def hpa_replicas(per_pod_img_s, load_img_s, cpu_target):
    """Whole pods that, each at `cpu_target` of `per_pod_img_s`, together serve `load_img_s`."""
    # BEGIN SOLUTION
    return math.ceil(load_img_s / (per_pod_img_s * cpu_target))
    # END SOLUTION


# %%
from servelab.assignments import checks as assignment_checks  # `checks` above is the validation table

if not len(service_points):
    step.not_run("exercise 08.2 at this run's throughput", f"no FastAPI load measurement of the `{deployed_engine}` "
                 "engine in this run's records", "a stand-in pod of 1 img/s (run notebook 01 or 04 in the same run)")
per_pod = float(service_points["throughput_img_s"].max()) / cores * shape.cpu_request if len(service_points) else 1.0
assignment_checks.replicas_for_load(hpa_replicas, per_replica_img_s=per_pod, target_img_s=20,
                                    utilisation=shape.cpu_target, exercise="08.2", step=step)

# %%
if len(service_points):
    best_thr = float(service_points["throughput_img_s"].max())
    best_row = service_points.loc[service_points["throughput_img_s"].idxmax()]  # which point: a figure of its moment
    best_at = ", ".join(f"{name} {best_row[col]}" for name, col in (("experiment", "experiment"), ("payload", "payload"),
                        ("clients", "concurrency")) if col in best_row and best_row[col] == best_row[col])
    node_memory_mb = float(step.environment.get("memory_gb") or 0) * 1024
    rss = (service_points["memory.rss_mb"].where(service_points["memory.rss_of"].astype(str).str.endswith("server"))
           if "memory.rss_of" in service_points else None)  # the service process's own memory, not the client's
    pod_rss_mb = float(rss.dropna().max()) if rss is not None and rss.notna().any() else None
    plan = replica_plan(20, per_core_img_s=best_thr / cores, node_cores=cores, node_memory_mb=node_memory_mb,
                        shape=shape, pod_rss_mb=pod_rss_mb, reserved_cpu=control_plane["cpu"],
                        reserved_memory_mb=KUBELET_EVICTION_MB + control_plane["memory_mb"])
    settled = min(max(plan.replicas, shape.min_replicas), shape.max_replicas)  # the HPA's bounds from hpa.yaml
    if plan.replicas < shape.min_replicas:
        bounds = (f", below the HPA's minReplicas of {shape.min_replicas}: it keeps {settled} running, more than the "
                  "load needs. ")
    elif plan.above_hpa_max:
        bounds = f", more than the HPA's maxReplicas of {shape.max_replicas}: it stops there and the load is not met. "
    else:
        bounds = f", within the HPA's {shape.min_replicas}–{shape.max_replicas}. "
    step.answer(
        f"The Deployment runs the `{deployed_engine}` engine (`SERVELAB_ENGINE` in deployment.yaml); that engine's "
        f"best service point in this run was {best_thr:.1f} img/s ({best_at}) on {cores:g} cores, {best_thr / cores:.1f} img/s "
        f"per core, so a pod held at {shape.cpu_target:.0%} of its {shape.cpu_request:g} CPU delivers about "
        f"{plan.per_pod_img_s:.1f} img/s and 20 img/s needs ⌈20 / {plan.per_pod_img_s:.1f}⌉ = {plan.replicas}"
        + bounds
        + f"A node like this machine ({cores:g} cores, {node_memory_mb / 1024:.1f} GiB)"
        + (f" that is also the kind cluster's control plane (its only node in k8s/kind/cluster.yaml), whose pods "
           f"request {control_plane['cpu']:g} CPU and {control_plane['memory_mb']:.0f} MiB of it (SOURCES.md)," if
           control_plane["cpu"] else "")
        + f" keeps {plan.allocatable_cpu:g} CPU and {plan.allocatable_memory_mb / 1024:.1f} GiB for the replicas after "
        f"{'those and ' if control_plane['cpu'] else ''}the kubelet's eviction reserve: it holds {plan.pods_per_node} "
        f"pod(s) of {shape.cpu_request:g} CPU and {shape.memory_request_mb / 1024:g} GiB — its "
        f"{'CPU' if plan.limited_by == 'cpu' else 'memory'} runs out first"
        + (f" — so {settled} replicas need {math.ceil(settled / plan.pods_per_node)} such nodes"
           + (" (fewer where the others run no control plane)." if control_plane["cpu"] else ".") if plan.pods_per_node
           else ", so no pod fits: this load needs bigger nodes, not more of them.")
        + (f" The service's measured memory ({pod_rss_mb:.0f} MB) is "
           + (f"above its {shape.memory_request_mb / 1024:g} GiB request: "
              + ("the scheduler would pack pods the node cannot hold" if plan.limited_by == "memory" else
                 "CPU limits the packing here, but a node with more cores would be packed past its memory")
              + ", so raise the request." if plan.memory_request_too_low else
              "within its memory request, so CPU, not memory, sets the packing.")
           if pod_rss_mb else ""))
else:
    step.not_run("replica estimate from a measured throughput", f"no FastAPI load measurement of the "
                 f"`{deployed_engine}` engine the Deployment runs in this run's records",
                 "run notebook 01 or 04 in the same run")

# %% [markdown]
# ## Deploy (on the GPU node, in a kind cluster)

# %%
show_commands("node",
              "kind create cluster --name servelab --config k8s/kind/cluster.yaml",
              "kind load docker-image servelab:cpu-baked-0.1.0 --name servelab",
              "kubectl apply -k k8s/base",
              "kubectl -n servelab rollout status deploy/servelab",
              "kubectl -n servelab get hpa,pdb,resourcequota",
              "kubectl -n servelab port-forward svc/servelab 8090:8002   # node port 8002 is Triton metrics",
              "bash scripts/kind_gpu_cluster.sh   # the GPU overlay: NVIDIA runtime in kind, device plugin, rollout")
import shutil

missing = [tool for tool in ("kind", "kubectl", "docker") if not shutil.which(tool)]
step.not_run("kind cluster, rollout, autoscaling under load",
             "this notebook only validates; the commands above run on the GPU node"
             + (f" (not found here: {', '.join(missing)})" if missing else ""),
             "every manifest validated against the Kubernetes API schema")

# %% [markdown]
# ### Exercise: probes for a model server
# Kubernetes asks a pod three questions: *has it started?* (`startupProbe`; the other probes wait until it
# passes; failing past its allowance restarts the container), *can it take traffic now?* (`readinessProbe`;
# failing takes the pod out of the Service) and *is the process alive?* (`livenessProbe`; failing restarts
# the container). For a model server "started" means the model loaded, so the startup probe asks the same
# endpoint as readiness: `/healthz` answers the moment the process listens, and a startup probe on it would
# pass while the model is still loading — its allowance would time nothing. That allowance must cover the
# model's load time — this run's cold start (measured in notebook 02, or here when 02 did not run):

# %%
cold = step.records(experiment="cold-start", server="fastapi")
slowest = "start_to_ready_max_s"  # the slowest of the fresh starts measured
if len(cold) and slowest in cold and cold[slowest].notna().any():
    cold_start_s = float(cold[slowest].dropna().max())
else:
    from servelab.bench.experiments import cold_start
    from servelab.errors import CannotRun

    measured = cold_start(step.run, servers=("fastapi",))[0]
    if measured.get(slowest) is None:
        raise CannotRun(f"could not start a service to time its cold start: {measured.get('note')}")
    cold_start_s = float(measured[slowest])
print(f"service start -> ready in this run, slowest start: {cold_start_s:.1f} s")

# %% tags=["exercise"]
# Exercise 08.1: write the startup, readiness and liveness probes
def service_probes(cold_start_s):
    """YAML for the container's startupProbe, readinessProbe and livenessProbe (httpGet, port `http`). The
    service answers /healthz while its process is up and /readyz once the model can serve; the startup
    probe must allow at least 2 × cold_start_s (periodSeconds × failureThreshold)."""
    # BEGIN SOLUTION
    period_s = 5
    attempts = int(2 * cold_start_s / period_s) + 2
    return (f"startupProbe: {{httpGet: {{path: /readyz, port: http}}, periodSeconds: {period_s}, "
            f"failureThreshold: {attempts}}}\n"
            "readinessProbe: {httpGet: {path: /readyz, port: http}, periodSeconds: 5, failureThreshold: 2}\n"
            "livenessProbe: {httpGet: {path: /healthz, port: http}, periodSeconds: 10, failureThreshold: 3}\n")
    # END SOLUTION


# %%
from servelab.assignments import checks as assignment_checks  # `checks` above is the validation table

assignment_checks.k8s_probes(service_probes, cold_start_s=cold_start_s, exercise="08.1", step=step)

# %%
probe = container["startupProbe"]  # the Deployment's, read from k8s/base/deployment.yaml above
period, attempts = int(probe["periodSeconds"]), int(probe["failureThreshold"])
startup = period * attempts
step.answer(f"This run's service needed {cold_start_s:.1f} s to become ready; the Deployment's startup probe allows "
            f"{period} s × {attempts} = {startup} s ({startup / max(cold_start_s, 0.1):.0f}× that) for `/readyz` to answer before the "
            "kubelet restarts the container. Too short, and a slow node restarts pods forever while they load; too "
            "long only delays the restart of a pod whose model load truly hangs.")

# %% [markdown]
# ## Compared with the source material
# The **photo-dedup "Step checklist and findings"** ends (step 8, still in progress there) by running the
# CPU inference container in a local kind cluster on a Mac: two pods behind a NodePort, an HPA at 2–6
# replicas and 60 % CPU with a 3-minute scale-down window, a PodDisruptionBudget and a ResourceQuota — the
# same objects as `k8s/base` here, which adds the three probes and a GPU overlay. Its scaling lesson carries
# over: on 4× RTX 4080 one Triton with an instance per GPU reached only 45 % efficiency, and it recommended
# *horizontal* scaling — several single-GPU replicas behind a load balancer — which is what a Deployment
# behind a Service is. See `SOURCES.md`; this repository's own GPU reference (one H100, 2026-11-26) is in
# `reference/nvidia-h100-80gb-hbm3/`.

# %%
n_ok = int((checks["outcome"] == "passed").sum())
bad = checks[checks["outcome"].isin(["failed", "error"])]
step.shows(f"{n_ok} of {len(checks)} Kubernetes checks passed"
           + (f"; failing: {', '.join(bad['check'].head(3))}." if len(bad) else
              f", {int((checks['outcome'] == 'skipped').sum())} skipped with the reason printed above.")
           + " Nothing was deployed: this notebook validates, the GPU node's kind cluster runs.")
