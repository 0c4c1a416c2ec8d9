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
# The same ONNX graph runs on the CPU, on CUDA, or through TensorRT: ONNX Runtime picks the hardware by
# its **execution provider** list. servelab never falls back silently — asking for `cuda` where CUDA is
# missing is an error — so a GPU number is always a GPU number.
#
# What to look for: which providers this machine's onnxruntime build offers, what happens when you ask for
# one it lacks, and the CPU engines' throughput, the baseline any GPU deployment must beat.

# %% tags=["parameters"]
place = ""                # local | node ("": $SERVELAB_PLACE, else local)
out_dir = ""              # "": results/interactive in this checkout
engines = ["onnx", "onnx-int8"]
batch_sizes = [1, 2]
duration_s = 0.4
warmup_s = 0.0
repeats = 1
requests = 2              # > 0: a fixed request count per point (smoke); 0: duration_s windows

# %%
from servelab.lab.places import place_defaults

globals().update(place_defaults(globals()))  # "" parameters -> this place's endpoints, model names, out_dir

# %%
from servelab.bench.experiments import engines as engines_experiment
from servelab.lab.nb import Step, show_commands

step = Step("03", out_dir, place)

# %% [markdown]
# ## Every engine on every execution provider
# In-process, one caller, back-to-back batches. A provider this machine lacks gets a row saying so (with
# ONNX Runtime's own reason) instead of a silent CPU fallback. `cosine_vs_torch_fp32` checks that the
# faster engines still compute the same embeddings.

# %%
recs = engines_experiment(step.run, engines=tuple(engines), providers=("cpu", "cuda", "tensorrt"),
                          batches=tuple(batch_sizes), opts=step.opts(duration_s, warmup_s, repeats, requests))
table = step.table(step.frame(recs, "engine", "provider", "available", "batch", "throughput_img_s", "latency_p50_ms",
                              "latency_p99_ms", "cosine_vs_torch_fp32", "note"), "engines",
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

# %%
measured = table[table["available"] != False].dropna(subset=["throughput_img_s"])  # noqa: E712
missing = sorted(set(table.loc[table["available"] == False, "provider"]))  # noqa: E712
if missing:
    step.not_run(f"engines on {', '.join(missing)}", "ONNX Runtime here has no such provider (no GPU on this machine)",
                 "CPU engines measured; run with --place node on the node")
best = measured.sort_values("throughput_img_s", ascending=False).iloc[0]
step.shows(f"The fastest engine here was **{best['engine']}** on **{best['provider']}** at batch {int(best['batch'])}: "
           f"{best['throughput_img_s']:.1f} img/s (p50 {best['latency_p50_ms']:.0f} ms"
           + (f", cosine vs torch fp32 {best['cosine_vs_torch_fp32']:.5f}). " if best["cosine_vs_torch_fp32"] == best["cosine_vs_torch_fp32"]
              else "; torch was not in this run's engines, so no cosine check). ")
           + (f"Not available here: {', '.join(missing)} — every number above is CPU-only." if missing
              else "GPU providers were available and measured."))
