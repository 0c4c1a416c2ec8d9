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
# Stuck on an error? [When something goes wrong](../docs/TROUBLESHOOTING.md) has the messages and their fixes.
# How a measurement is read here (windows, drift, alternating windows, and when a lead is ranked): [How this lab reads a measurement](../docs/METHOD.md).
#
# **After this notebook you can**
# - explain how ONNX Runtime chooses hardware (an ordered list of execution providers, each operator to the
#   first that can run it) and why a silent fallback is dangerous for measurements;
# - read which providers an onnxruntime build offers, and what the error says when one is missing;
# - predict from the operator mix and the hardware whether int8 or a bigger batch will pay on a CPU.
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
# its **execution provider** list. servelab never falls back silently — asking for `cuda` where CUDA is
# missing is an error — so a GPU number is always a GPU number.
#
# What to look for: which providers this machine's onnxruntime build offers, what happens when you ask for
# one it lacks, and the CPU engines' throughput, the baseline any GPU deployment must beat.

# %% tags=["parameters"]
harness = {}              # where this runs: filled by `servelab lab run` ({}: this place's defaults)
engines = ["torch", "onnx", "onnx-int8"]
batch_sizes = [1, 8]

# %%
from servelab.lab.session import session

lab = session("03", globals())  # endpoints, model names, results folder and load profile of this run

# %%
from servelab.bench.experiments import raw_engines
from servelab.lab.step import show_commands

step = lab.step

# %% [markdown]
# ## The code that picks the provider
# servelab's ONNX Runtime engine, read from `servelab.model.engines`: it refuses a provider this build lacks
# before creating the session, and after creating it checks which provider ONNX Runtime actually made
# active — because ONNX Runtime itself falls back to the next provider in the list *without an error*.

# %%
from servelab.lab.step import show_code
from servelab.model.engines import OrtEmbedder, check_active_provider

show_code(OrtEmbedder.__init__)
show_code(check_active_provider)

# %% [markdown]
# ## Every engine on every execution provider
# In-process, one caller, back-to-back batches. A provider this machine lacks gets a row saying so (with
# ONNX Runtime's own reason) instead of a silent CPU fallback. `cosine_vs_torch_fp32` checks that the
# faster engines still compute the same embeddings.
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
# These points were measured one after another, minutes apart, so the machine's drift lies between them. A
# lead is ranked only when every window of one beat every window of the other by more than this run's margin
# (10 %, or the drift the probe measured when larger); a smaller lead in every window is still reported, with
# its size and the reason it is not ranked ([how a measurement is read](../docs/METHOD.md)).

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
# ## Why, and compared with the source material
# The model is mostly matrix products (notebook 05a's profile), so its speed is the speed of the matrix
# units: on a CPU, a few wide vector units per core — int8 helps when the CPU has VNNI instructions, and a
# batch helps only as far as it keeps those units fed; on a GPU,
# thousands of multiply-add units that a single image leaves mostly idle. The **photo-dedup "ONNX Runtime /
# Triton optimisation report"** measured the same model's batch scaling on a CPU: 33.4 img/s at batch 1,
# 49.0 at batch 4, 54.7 at batch 32 — 1.6× for 32× the batch. On its RTX A4000 the GPU compute per request
# was 31.1 ms with the ONNX CUDA EP and 4.7 ms with the TensorRT EP (6.6×), and its "Technical Deep-Dive" found the best
# provider depends on the GPU (ONNX CUDA EP on an A100 at 4.4 ms, TensorRT EP on an RTX 4080 at 2.0 ms).
# See `SOURCES.md`; this repository's own GPU reference (one H100, 2026-11-26) is in
# `reference/nvidia-h100-80gb-hbm3/`; its figure for this question is printed under the headline.

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
