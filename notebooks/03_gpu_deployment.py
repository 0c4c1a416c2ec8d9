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
# # 03 · GPU deployment: execution providers
#
# Stuck? [When something goes wrong](../docs/TROUBLESHOOTING.md); how a figure is read:
# [How this lab reads a measurement](../docs/METHOD.md).
#
# **After this notebook you can**
# - explain how ONNX Runtime chooses hardware (an ordered list of execution providers, each operator to the
#   first that can run it) and why a silent fallback is dangerous for measurements;
# - read which providers an onnxruntime build offers, and what the error says when one is missing;
# - predict from the operator mix and the hardware whether int8 or a bigger batch will pay on a CPU;
# - see what a silent fallback costs, and why a service in front of a GPU is often bound by its CPU.
#
# ```mermaid
# flowchart LR
#   G[model.onnx<br/>2,000+ nodes] --> S[InferenceSession<br/>providers = ordered list]
#   S -->|first choice| TRT[TensorRT EP<br/>fused fp16 engine]
#   S -->|next| CUDA[CUDA EP<br/>cuBLAS kernels]
#   S -->|last resort| CPU[CPU EP<br/>MLAS, int8 with VNNI]
#   S --> CHK{first active provider<br/>== the one asked for?}
#   CHK -->|no| ERR[EngineError: refuse to run]
# ```
#
# The same ONNX graph runs on the CPU, on CUDA, or through TensorRT: ONNX Runtime picks the hardware by
# its **execution provider** list. Look for which providers this build offers, what happens when you ask for
# one it lacks, and the CPU engines' throughput, the baseline any GPU deployment must beat. Two sections use
# the **emulated accelerator** (batches wait t(B) from a profile fitted to this repository's H100 run): its
# rows say `emulated <profile>` and are never a GPU measurement.

# %% tags=["parameters"]
harness = {}              # where this runs: filled by `servelab lab run` ({}: this place's defaults)
engines = ["torch", "onnx", "onnx-int8"]
batch_sizes = [1, 8]
device_profile = "vit-b32-h100"  # the emulated accelerator's profile (servelab.model.device_profile), or a *.json file
frontend_clients = 16     # clients of the service in front of the emulated device at real time scale
frontend_max_batch = 64   # that service's largest micro-batch

# %%
from servelab.lab.session import session

lab = session("03", globals())  # endpoints, model names, results folder and load profile of this run

# %%
from servelab.bench.experiments import raw_engines
from servelab.lab.step import show_commands

step = lab.step

# %% [markdown]
# ## The code that picks the provider
# servelab's engine (`servelab.model.engines`) refuses a provider this build lacks, and after creating the
# session checks which provider is active, because ONNX Runtime itself falls back *without an error*: a GPU
# number is always a GPU number.

# %%
from servelab.lab.step import show_code
from servelab.model.engines import OrtEmbedder, check_active_provider

show_code(OrtEmbedder.__init__)
show_code(check_active_provider)

# %% [markdown]
# ## Every engine on every execution provider
# In-process, one caller, back-to-back batches. A provider this build lacks gets a row saying why.
# `cosine_vs_torch_fp32` checks that the faster engines still compute the same embeddings.
#
# **Predict first.** On this machine's CPU: will the int8 engine be faster than fp32, and by how much? Will
# a bigger batch raise images per second on the CPU? Which rows will say "not available"?

# %%
recs = raw_engines(step.run, engines=tuple(engines), providers=("cpu", "cuda", "tensorrt"),
                   batches=tuple(batch_sizes), opts=lab.load)
# int8 on a GPU provider: ONNX Runtime's profile says how many of its nodes ran on the CPU anyway
from dataclasses import replace

from servelab.bench.experiments import ort_profile
from servelab.lab.provider_summary import ProviderSummary, cpu_nodes_note

for gpu in ("cuda", "tensorrt"):
    int8_rows = [r for r in recs if r.get("engine") == "onnx-int8" and r.get("provider") == gpu
                 and r.get("throughput_img_s")]
    note = cpu_nodes_note(ort_profile(step.run, engine="onnx-int8", provider=gpu, batch=1, iterations=1)[0]) \
        if int8_rows else ""
    for r in int8_rows:
        r["note"] = note or r.get("note")
table = step.table(step.frame(recs, "engine", "provider", "available", "batch", "throughput_img_s",
                              "throughput_min_img_s", "throughput_max_img_s", "latency_p50_ms", "latency_p99_ms",
                              "stable", "cosine_vs_torch_fp32", "note"), "engines",
                   "Engines × execution providers (in-process)")

# %% [markdown]
# ### Exercise: read the table
# A nightly job embeds a whole photo library on this machine's CPU, in the largest batches measured.
# Which engine would you run it with?

# %% tags=["exercise"]
# Exercise 03.1: choose the engine for batch jobs on this CPU
def batch_job_engine(table):
    """The `engine` with the highest throughput_img_s on provider "cpu" at the largest batch measured."""
    # BEGIN SOLUTION
    cpu_rows = table[(table["provider"] == "cpu") & (table["batch"] == table["batch"].max())]
    return cpu_rows.loc[cpu_rows["throughput_img_s"].idxmax(), "engine"]
    # END SOLUTION


# %%
from servelab.assignments import checks

checks.best_choice(batch_job_engine, table, key="engine", metric="throughput_img_s",
                   at={"provider": "cpu", "batch": max(batch_sizes)}, exercise="03.1", step=step)

# %% [markdown]
# These points were measured minutes apart, drift between them; a lead is ranked only past this run's margin
# ([how a measurement is read](../docs/METHOD.md)).

# %%
cpu = {(r["engine"], r["batch"]): r for r in recs if r.get("provider") == "cpu" and r.get("throughput_img_s")}
b_lo, b_hi = min(batch_sizes), max(batch_sizes)
lines = [step.versus(f"{e} batch {b_hi}", cpu[(e, b_hi)], f"{e} batch {b_lo}", cpu[(e, b_lo)])
         for e in engines if (e, b_lo) in cpu and (e, b_hi) in cpu]
if ("onnx", b_hi) in cpu and ("onnx-int8", b_hi) in cpu:
    lines.append(step.versus(f"onnx-int8 batch {b_hi}", cpu[("onnx-int8", b_hi)], f"onnx batch {b_hi}", cpu[("onnx", b_hi)]))
providers_seen = ProviderSummary.of(recs)
if not step.environment.get("gpus"):  # no GPU at all: say that, not the first engine's error (the table has each)
    providers_seen = replace(providers_seen, not_run={p: "no CUDA GPU on this machine" for p in providers_seen.not_run})
step.answer("; ".join(lines) + ". " + (providers_seen.sentence() if providers_seen.not_run else
                                       "Every provider asked for was measured."))

# %% [markdown]
# ## When the provider asked for is missing: the fallback, and what it costs
# A script that calls ONNX Runtime directly gets no such check. Below, a plain session is asked for CUDA
# first, as most examples write it, and measured at the largest batch, beside the emulated H100's rate at the
# same batch (its profile at real time scale).
#
# **Predict first.** Will creating the session raise an error? If not, which provider will run it, and how
# many times slower than the emulated H100 will it be?

# %% [markdown]
# ### Exercise: make the session yourself
# As such a script does: `ort.InferenceSession(path, providers=providers)`, nothing else.

# %% tags=["exercise"]
# Exercise 03.3: create an ONNX Runtime session for a providers list
import onnxruntime as ort


def make_session(path, providers):
    """An onnxruntime.InferenceSession for the model at `path`, asking for `providers` in that order."""
    # BEGIN SOLUTION
    return ort.InferenceSession(str(path), providers=providers)
    # END SOLUTION


# %%
from servelab.config import Settings
from servelab.model.export import ensure_exported
from servelab.model.providers import ort_providers

model_path = ensure_exported(Settings.from_env())["path"]
checks.ort_session(make_session, path=model_path, providers=ort_providers("cuda"), exercise="03.3", step=step)

# %%
from servelab.bench.experiments.emulated_lesson import short_opts
from servelab.bench.experiments.provider_fallback import PlainSession, provider_fallback
from servelab.model.device_profile import profile as device_profile_named

emu_device = device_profile_named(device_profile)
print("providers=", ort_providers("cuda"))
fb = provider_fallback(step.run, model_path, device=emu_device, asked="cuda",
                       batch=max(batch_sizes), opts=short_opts(lab.load))  # a few windows: where it ran, not a ranking
print("ONNX Runtime said:", "; ".join(fb.warnings) or "nothing in Python (see its log above)")
print("session.get_providers():", fb.active)
fallback_table = step.table(step.frame([fb.measured, fb.emulated], "engine", "provider", "asked_provider", "batch", "throughput_img_s",
                      "throughput_min_img_s", "throughput_max_img_s", "measured", "note"), "provider_fallback",
                            f"A plain session asked for CUDA (measured here) and {emu_device.label} at the same batch "
                            "(from its profile, an emulation)")

# %%
b_fb, got = max(batch_sizes), fb.measured["throughput_img_s"]
smoke_note = " (Smoke run: these numbers are not results.)" if lab.load.quick else ""
step.answer((
    f"No error: ONNX Runtime {'warned and ' if fb.warnings else ''}ran the session on {fb.active[0]}. At batch {b_fb} "
    f"it did {got:.1f} img/s here; {emu_device.label} (from its profile; an emulation, not a measurement) does "
    f"{fb.emulated['throughput_img_s']:,.0f} img/s at the same batch, {fb.cost:,.0f}× more. A record labelled `cuda` "
    "for this session would have been a CPU figure; servelab's own `cuda` rows above are refusals instead."
    if fb.fell_back else
    f"CUDA ran here ({', '.join(fb.active)}): nothing fell back, and the session did {got:.1f} img/s at batch {b_fb}."
) + smoke_note)

# %%
import warnings

import pandas as pd

from servelab.bench.servers.in_process import make_embedder


def options(session):
    so = session.get_session_options()
    return {"intra_op_num_threads": so.intra_op_num_threads, "inter_op_num_threads": so.inter_op_num_threads,
            "graph_optimization_level": so.graph_optimization_level.name, "execution_mode": so.execution_mode.name}


sessions = {"the plain session measured above": PlainSession(model_path, "cuda").session,
            "servelab's onnx engine": make_embedder("onnx", "cpu").session}
try:
    with warnings.catch_warnings():  # its fallback warning was shown by the check above
        warnings.simplefilter("ignore")
        sessions = {"your make_session": make_session(model_path, ort_providers("cuda")), **sessions}
except NotImplementedError:  # exercise 03.3 not done yet
    pass
options_table = step.table(pd.DataFrame([{"session": name, **options(sess)} for name, sess in sessions.items()]),
                           "session_options", "ONNX Runtime session options, read from each session "
                           "(intra_op_num_threads 0: ONNX Runtime chooses)")

# %%
plain, engine_opts = options(sessions["the plain session measured above"]), options(sessions["servelab's onnx engine"])
differ = [k for k in plain if plain[k] != engine_opts[k]]
engine_rec = cpu.get(("onnx", b_fb))
yours = options(sessions["your make_session"]) if "your make_session" in sessions else None
step.answer(("Your make_session has the plain session's options. " if yours == plain else "")
            + (f"The plain session and servelab's engine differ in {', '.join(differ)}; this run measured their rates, "
             "not which option made a difference" if differ else
             "The plain session and servelab's engine have the same options read here, so those options do not "
             "explain a gap between their rates")
            + (": " + step.versus(f"the plain session at batch {b_fb}", fb.measured, "servelab's onnx engine",
                                  engine_rec) + ", measured minutes apart, the plain session in a few windows."
               if engine_rec and got else "."))

# %% [markdown]
# ## On the GPU node
# The GPU image (`docker/Dockerfile.gpu`) carries `onnxruntime-gpu` and CUDA torch; the service picks the
# provider from `SERVELAB_PROVIDER`.

# %%
show_commands("node",
              "nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv",
              "docker compose -f docker/compose.03-service-gpu.yaml up -d",
              "curl -s http://127.0.0.1:8080/info        # engine, provider, weights")

# %% [markdown]
# ### Exercise: the provider list on the GPU node
# ONNX Runtime tries execution providers in the order given and assigns each operator to the first one
# that can run it. Write the `providers=[…]` list for a session on the node that should use TensorRT.

# %% tags=["exercise"]
# Exercise 03.2: order ONNX Runtime's execution providers for TensorRT
def providers_for(want):
    """The providers list for onnxruntime.InferenceSession(path, providers=…): `want` ("tensorrt") first,
    with fallbacks so that every operator still runs somewhere."""
    # BEGIN SOLUTION
    gpu_chain = {"tensorrt": ["TensorrtExecutionProvider", "CUDAExecutionProvider"], "cuda": ["CUDAExecutionProvider"]}
    return gpu_chain.get(want, []) + ["CPUExecutionProvider"]
    # END SOLUTION


# %%
checks.execution_providers(providers_for, want="tensorrt", exercise="03.2", step=step)

# %% [markdown]
# ## In front of a fast device: what sets the pace?
# The H100 reference run (`reference/nvidia-h100-80gb-hbm3/README.md`) served 451 img/s tensor-in to 128
# clients from an engine that ran 9,280 img/s fed from host memory, with the GPU busy 2–9 % of the time: each
# request's CPU work in the service (receiving 602 KB, batching, answering), not the GPU, set the pace.
#
# The service below runs the `emulated` engine with that run's profile **at real time scale** (batches take
# as long as on that H100), so this machine's CPU does all the rest. The clients send batch-1 tensors; the
# device's rate and busy share come from the service's batch counters and the profile.
#
# **Predict first.** What share of the time will the emulated device be busy? How many images will the
# service put in a batch, and how close will its rate come to what the device does at that batch?

# %%
import pandas as pd

from servelab.bench.experiments.frontend_bound import device_env, frontend_bound, real_time
from servelab.bench.servers.lifecycle import served

rt_device = real_time(emu_device)
with served("fastapi", engine="emulated", max_batch=frontend_max_batch,
            env=device_env(rt_device, step.out_dir / "frontend-device")) as srv:
    fe = frontend_bound(step.run, srv, rt_device, concurrency=frontend_clients, opts=short_opts(lab.load))
cpu_of = {k: fe.record.get(f"{k}_cpu_pct") for k in ("server", "client_process")}
frontend_table = step.table(pd.DataFrame([{"device": rt_device.label, "clients": frontend_clients, "served_img_s": fe.served_img_s,
                          "avg_batch": round(fe.avg_batch, 2), "device_img_s_at_that_batch": fe.device_img_s,
                          f"device_img_s_at_batch_{frontend_max_batch}": fe.ceiling_img_s,
                          "device_busy_pct": round(100 * fe.busy_share, 1), "service_cpu_pct": cpu_of["server"],
                          "client_cpu_pct": cpu_of["client_process"]}]), "frontend_bound",
           f"The service in front of {rt_device.label}: served rate and CPU measured here, the device's rate and busy "
           "share from its profile (an emulation at real time scale, not a GPU)")

# %%
svc_cpu, client_cpu = cpu_of["server"] or 0, cpu_of["client_process"] or 0
step.answer(
    f"The service served {fe.served_img_s:,.0f} img/s to {frontend_clients} clients, {fe.avg_batch:.1f} images per batch "
    f"on average. The emulated device ({rt_device.label}; an emulation) runs such batches at {fe.device_img_s:,.0f} "
    f"img/s and batches of {frontend_max_batch} at {fe.ceiling_img_s:,.0f}, so it was busy {100 * fe.busy_share:.0f} % "
    f"of the time and idle {100 * (1 - fe.busy_share):.0f} %. Meanwhile the service process used {svc_cpu:.0f} % of "
    f"one core and the clients {client_cpu:.0f} %: "
    + {"service": "the device waited most of the time and the service was the busier process, so the service's "
                  "work per request, not the device, decided the rate. That is the H100 run's finding, and why the "
                  "fixes that pay on a GPU node cut CPU work per request (fewer bytes, no copies, several frontend "
                  "processes).",
       "clients": "the device waited most of the time, but the busier process was the clients, a Python load "
                  "generator on the same cores: this run shows the device idle, not that the service's own work per "
                  "request set the pace. The H100 run found that it did, which is why the fixes that pay on a GPU "
                  "node cut that work (fewer bytes, no copies, several frontend processes).",
       "device": "the device was busy most of the time, so here it, not the CPU side, was the limit: unlike the "
                 "H100 run."}[fe.limit]
    + smoke_note)

# %% [markdown]
# ## Why, and compared with the source material
# The model is mostly matrix products (05a's profile), so its speed is the speed of the matrix units: on a
# CPU, a few wide vector units per core (int8 helps with VNNI instructions, a batch only as far as it keeps
# them fed); on a GPU, thousands of multiply-add units a single image leaves mostly idle (one image 3.5 ms,
# 256 in 8.5 ms: `reference/nvidia-h100-80gb-hbm3/`). The **photo-dedup
# optimisation report** measured the model on a CPU at 33.4 img/s at batch 1 and 54.7 at batch 32, and on its
# RTX A4000 31.1 ms per request with the CUDA EP against 4.7 ms with TensorRT; its "Technical Deep-Dive" found
# the best provider depends on the GPU. See `SOURCES.md`; the H100 reference
# (`reference/nvidia-h100-80gb-hbm3/`) is printed under the headline.

# %%
measured = table[table["available"] != False].dropna(subset=["throughput_img_s"])  # noqa: E712
for provider, why in providers_seen.not_run.items():
    step.not_run(f"engines on {provider}", why, f"measured here: {', '.join(providers_seen.measured) or 'nothing'}; "
                 "run with --place node on the node")
# each engine at its best batch, read as above: ranked past the run's margin, a smaller lead in every window with its size
by_engine = measured.sort_values("throughput_img_s", ascending=False).drop_duplicates(["engine", "provider"])
recs_by_point = {(r["engine"], r.get("provider"), r["batch"]): r for r in recs if r.get("throughput_img_s")}
cosines = by_engine["cosine_vs_torch_fp32"].dropna()
# named in a fixed order (engine, provider): the sentence must not rank two engines by the order a tie left them in
fastest = step.leader({f"{r['engine']} on {r['provider']}": recs_by_point[(r["engine"], r["provider"], r["batch"])]
                  for _, r in by_engine.sort_values(["engine", "provider"]).iterrows()})
step.shows(f"Each engine at its best batch size: {fastest}. "
           + (f"Every one matched torch fp32 to cosine ≥ {cosines.min():.5f}. " if len(cosines)
              else "torch was not in this run's engines, so no cosine check. ")
           + providers_seen.sentence())
