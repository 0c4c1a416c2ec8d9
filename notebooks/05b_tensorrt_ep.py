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
# # 05b · TensorRT execution provider
#
# **After this notebook you can**
# - say what TensorRT does to a graph (fuses kernels, picks fp16, tunes for one GPU and a range of shapes)
#   and why that makes a transformer several times faster on the same GPU;
# - explain why the first start of a TensorRT model takes minutes, and configure the engine cache,
#   optimisation profile and warm-up so that users never wait for it;
# - check a generated Triton configuration for those settings.
#
# ```mermaid
# flowchart LR
#   O[model.onnx] --> B{engine for this GPU,<br/>precision and shape range<br/>in /trt_cache?}
#   B -->|no: first start| BUILD[TensorRT build<br/>minutes] --> CACHE[(/trt_cache volume<br/>engine + timing cache)]
#   B -->|yes: restart| LOAD[load engine<br/>seconds]
#   CACHE --> LOAD
#   LOAD --> W[warm-up request<br/>at model load] --> READY[model READY]
#   Q[(dynamic batcher:<br/>batch 1..max)] -->|shape inside the profile| READY
# ```
#
# On an NVIDIA GPU, ONNX Runtime can hand the graph to **TensorRT**, which compiles it into an engine
# specialised for the GPU, the precision (fp16 here) and a range of input shapes. Building that engine
# takes minutes, so three settings decide whether users ever wait for it:
#
# - the **engine cache** and **timing cache** on a mounted volume (`/trt_cache`), so a restart reuses them;
# - an **optimisation profile** (`trt_profile_min/opt/max_shapes`) covering batch 1 … `max_batch_size`, so
#   the dynamic batcher never produces a shape that forces a rebuild;
# - **model warm-up** at load time, so the first user request does not pay for the build.
#
# This notebook renders the GPU model repository with `servelab triton stage --flavour gpu` and checks those
# settings in the generated `config.pbtxt`. The engine build itself needs a GPU.

# %% tags=["parameters"]
place = ""                # local | node ("": $SERVELAB_PLACE, else local)
out_dir = ""              # "": results/interactive in this checkout
trt_max_batch = 64
trt_cache = "/trt_cache"

# %%
from servelab.lab.places import place_defaults

globals().update(place_defaults(globals()))  # "" parameters -> this place's endpoints, model names, out_dir

# %%
from pathlib import Path

from servelab.lab.step import Step, show_commands

step = Step("05b", out_dir, place)

# %% [markdown]
# ## Render the GPU repository (here) and read the TensorRT model's settings
# **Predict first.** A dynamic batcher with `max_batch_size` 64 can hand the model any batch from 1 to 64.
# Without an optimisation profile, TensorRT builds an engine for each new input shape it meets. How many
# builds could a day of traffic trigger, and what does each cost a user who happens to be in that batch?

# %%
from servelab.triton.models import TRT_ENCODER
from servelab.triton.repository import config_text, parse_config, stage

staged = stage("gpu", out=Path(out_dir) / "models_gpu", max_batch=trt_max_batch, trt_cache=trt_cache)
trt_config = Path(staged["repository"]) / TRT_ENCODER / "config.pbtxt"
without_stanza = parse_config(trt_config)
without_stanza.ClearField("optimization")  # exercise 05b.1 asks you to write it: shown in full after the check
print(config_text(without_stanza) + "\n# optimization { … }  <- the TensorRT stanza: exercise 05b.1 below")

# %% [markdown]
# ## Check them
# Each row is one property the TensorRT deployment needs, read from the generated config.

# %%
from servelab.lab.configcheck import check_trt_config

checks = step.table(check_trt_config(trt_config), "trt_settings", "TensorRT engine-cache settings, checked")

# %%
ok = int(checks["ok"].sum())
step.answer(f"Up to {trt_max_batch} builds, one per batch size the batcher forms, each taking minutes (the photo-dedup "
            "write-ups measured 2–5 min for a first start) while that batch's requests wait; one profile covering 1 to "
            f"{trt_max_batch} needs one build, and the cache volume makes it a once-per-GPU cost. {ok} of {len(checks)} "
            "settings checked above are as that requires.")

# %% [markdown]
# ### Exercise: write the TensorRT stanza yourself
# Write the `optimization { execution_accelerators { … } }` stanza that gives the ONNX Runtime backend the
# settings checked above: TensorRT in fp16, the engine cache on the mounted volume, and an optimisation
# profile for every batch the dynamic batcher can form. The check parses it into Triton's `ModelConfig`.

# %% tags=["exercise"]
# Exercise 05b.1: write the TensorRT execution-accelerator stanza
def trt_stanza(max_batch, cache_path):
    """config.pbtxt text: optimization { execution_accelerators { gpu_execution_accelerator: [ … ] } } with
    the "tensorrt" accelerator, its parameters for precision, engine cache (at cache_path) and the
    trt_profile_{min,opt,max}_shapes of input pixel_values ("pixel_values:<batch>x3x224x224")."""
    # BEGIN SOLUTION
    def profile_shape(batch):
        return f"pixel_values:{batch}x3x224x224"

    settings = {"precision_mode": "FP16", "trt_engine_cache_enable": "1", "trt_engine_cache_path": cache_path,
                "trt_profile_min_shapes": profile_shape(1), "trt_profile_opt_shapes": profile_shape(max(1, max_batch // 4)),
                "trt_profile_max_shapes": profile_shape(max_batch)}
    entries = " ".join(f'parameters {{ key: "{k}" value: "{v}" }}' for k, v in settings.items())
    return f'optimization {{ execution_accelerators {{ gpu_execution_accelerator: [ {{ name: "tensorrt" {entries} }} ] }} }}'
    # END SOLUTION


# %%
from servelab.assignments import checks as assignment_checks  # `checks` above is the settings table

assignment_checks.trt_accelerator_stanza(trt_stanza, max_batch=trt_max_batch, cache_path=trt_cache,
                                         exercise="05b.1", step=step)

# %% [markdown]
# The staged model's whole config, its TensorRT stanza included — compare it with yours:

# %%
print(trt_config.read_text())

# %% [markdown]
# ## On the GPU node
# The first load builds the engine (minutes); the second start finds it in the cache volume. The engine
# files in `/trt_cache` start with `openclip_` and the export's sha256, so other weights get their own.

# %%
show_commands("node",
              "docker compose -f docker/compose.04-triton.yaml up -d",
              "docker compose -f docker/compose.04-triton.yaml logs -f triton   # first start: engine build",
              "docker compose -f docker/compose.04-triton.yaml exec triton ls -la /trt_cache   # engines + timing cache",
              "docker compose -f docker/compose.04-triton.yaml restart triton     # second start: cache hit, seconds")

# %% [markdown]
# ## Why TensorRT is faster, and compared with the source material
# A ViT is a chain of small operations around big matrix products: LayerNorm, MatMul, bias, GELU, another
# MatMul. ONNX Runtime's CUDA EP launches a kernel for most of them and writes every intermediate tensor to
# GPU memory; TensorRT fuses such chains into single kernels, runs them in fp16 on the Tensor Cores (half
# the bytes to move), and picks each kernel by timing it on the GPU at hand. The **photo-dedup "Technical
# Deep-Dive"** measured it on an RTX A4000: GPU compute 31.1 ms with the ONNX CUDA EP, 4.7 ms with the
# TensorRT EP (6.6×), with cosine similarity above 0.999 to fp32 — fp16 is safe for embeddings. It also
# met the failure this notebook guards against: on the A100 the TensorRT model measured 29.1 ms, and one
# gRPC/HTTP comparison caught it at ~1,658 ms while an engine was still compiling — the engine cache and
# profile were not yet set up as they are here. This machine has no GPU, so only the configuration is
# checked; see `SOURCES.md`. This repository's own GPU reference results, including engine build time and
# cache reuse, will be filed under `reference/` once measured on a GPU node.

# %%
if place != "node":
    step.not_run("TensorRT engine build, cache reuse timing and fp16 throughput",
                 "TensorRT needs an NVIDIA GPU and this machine has none",
                 "the engine-cache configuration was rendered and checked")
else:
    step.not_run("engine build timing", "this notebook checks configuration; the build happens in the Triton container",
                 "read it from `docker compose logs triton` on the node; measure the TensorRT model with "
                 "`--only 04 --only 07 --param triton_model=openclip_vit_b32_trt`")
passed, total = int(checks["ok"].sum()), len(checks)
step.shows(f"{passed} of {total} TensorRT settings in the generated `{TRT_ENCODER}` config are as the deployment "
           f"needs them (profile up to batch {trt_max_batch}, caches under `{trt_cache}`)."
           + ("" if passed == total else " The failing rows above name what to fix in servelab/triton/staging/gpu."))
