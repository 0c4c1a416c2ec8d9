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
# Beyond one machine, the service runs as a Kubernetes **Deployment** behind a **Service**, scaled by a
# **HorizontalPodAutoscaler** (2–6 replicas at 60 % CPU), protected during node drains by a
# **PodDisruptionBudget**, and bounded by a **ResourceQuota**. Readiness (`/readyz`: the model is loaded)
# and liveness (`/healthz`) probes let Kubernetes route traffic only to pods that can answer. A GPU overlay
# requests `nvidia.com/gpu`. `k8s/` is a kustomize base plus overlays, for a kind cluster on the GPU node
# or a real cluster.
#
# There is no cluster here, so this notebook renders the manifests and validates each against the
# Kubernetes API schema for its kind (deserialised with the official Python client's models).

# %% tags=["parameters"]
place = ""                # local | node ("": $SERVELAB_PLACE, else local)
out_dir = ""              # "": results/interactive in this checkout

# %%
from servelab.lab.places import place_defaults

globals().update(place_defaults(globals()))  # "" parameters -> this place's endpoints, model names, out_dir

# %%
from servelab.lab.nb import Step, run_checks, show_commands

step = Step("08", out_dir, place)

# %% [markdown]
# ## Validate every manifest and overlay (runs here)

# %%
checks = step.table(run_checks("tests/deploy/test_deploy_k8s.py"), "validation",
                    "Kubernetes manifests validated against the API schema (no cluster)")

# %% [markdown]
# ## Deploy (on the GPU node, in a kind cluster)

# %%
show_commands("node",
              "kind create cluster --name servelab --config k8s/kind/cluster.yaml",
              "kind load docker-image servelab:cpu-baked-0.1.0 --name servelab",
              "kubectl apply -k k8s/base",
              "kubectl -n servelab rollout status deploy/servelab",
              "kubectl -n servelab get hpa,pdb,resourcequota",
              "kubectl -n servelab port-forward svc/servelab 8090:8002   # node port 8002 is Triton metrics")
step.not_run("kind cluster, rollout, autoscaling under load", "no Kubernetes cluster (and no Docker engine) here",
             "every manifest validated against the Kubernetes API schema")

# %% [markdown]
# ### Exercise: probes for a model server
# Kubernetes asks a pod three questions: *has it started?* (`startupProbe`; the other probes wait until it
# passes), *can it take traffic now?* (`readinessProbe`; failing takes the pod out of the Service) and *is
# the process alive?* (`livenessProbe`; failing restarts the container). The startup probe must allow for
# the model's load time — this run's cold start (measured in notebook 02, or here when 02 did not run):

# %%
cold = step.records(experiment="cold-start", target="fastapi")
if len(cold) and "start_to_ready_s" in cold and cold["start_to_ready_s"].notna().any():
    cold_start_s = float(cold["start_to_ready_s"].dropna().max())
else:
    from servelab.bench.experiments import cold_start

    measured = cold_start(step.run, targets=("fastapi",), quick=True)[0]
    if measured.get("start_to_ready_s") is None:
        raise RuntimeError(f"could not start a service to time its cold start: {measured.get('note')}")
    cold_start_s = float(measured["start_to_ready_s"])
print(f"service start -> ready in this run: {cold_start_s:.1f} s")

# %% tags=["exercise"]
# Exercise 08.1: write the startup, readiness and liveness probes
def service_probes(cold_start_s):
    """YAML for the container's startupProbe, readinessProbe and livenessProbe (httpGet, port `http`). The
    service answers /healthz while its process is up and /readyz once the model can serve; the startup
    probe must allow at least 2 × cold_start_s (periodSeconds × failureThreshold)."""
    # BEGIN SOLUTION
    period_s = 5
    attempts = int(2 * cold_start_s / period_s) + 2
    return (f"startupProbe: {{httpGet: {{path: /healthz, port: http}}, periodSeconds: {period_s}, "
            f"failureThreshold: {attempts}}}\n"
            "readinessProbe: {httpGet: {path: /readyz, port: http}, periodSeconds: 5, failureThreshold: 2}\n"
            "livenessProbe: {httpGet: {path: /healthz, port: http}, periodSeconds: 10, failureThreshold: 3}\n")
    # END SOLUTION


# %%
from servelab.assignments import checks as assignment_checks  # `checks` above is the validation table

assignment_checks.k8s_probes(service_probes, cold_start_s=cold_start_s, exercise="08.1", step=step)

# %%
n_ok = int((checks["outcome"] == "passed").sum())
bad = checks[checks["outcome"].isin(["failed", "error"])]
step.shows(f"{n_ok} of {len(checks)} Kubernetes checks passed"
           + (f"; failing: {', '.join(bad['check'].head(3))}." if len(bad) else
              f", {int((checks['outcome'] == 'skipped').sum())} skipped with the reason shown above.")
           + " Nothing was deployed: this machine has no cluster.")
