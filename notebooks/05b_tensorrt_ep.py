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
# Stuck? [When something goes wrong](../docs/TROUBLESHOOTING.md); how a figure is read:
# [How this lab reads a measurement](../docs/METHOD.md).
#
# **After this notebook you can**
# - say what TensorRT does to a graph (fuses kernels, picks fp16, tunes for one GPU and a range of shapes)
#   and why that makes a transformer several times faster on the same GPU;
# - explain why the first start of a TensorRT model takes minutes, and configure the engine cache,
#   optimisation profile and warm-up so that users never wait for it;
# - check a generated Triton configuration for those settings, and predict which request pays an engine build.
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
# On an NVIDIA GPU, ONNX Runtime can hand the graph to **TensorRT**, which compiles it into an engine for
# one GPU, precision and range of input shapes. A build takes minutes; three settings decide whether users wait:
#
# - the **engine cache** and **timing cache** on a mounted volume (`/trt_cache`), so a restart reuses them;
# - an **optimisation profile** (`trt_profile_min/opt/max_shapes`) covering batch 1 … `max_batch_size`, so
#   no batch the dynamic batcher forms forces a rebuild;
# - **model warm-up** at load time, so the first user request does not pay for the build.
#
# This notebook renders the GPU model repository (`servelab triton stage --flavour gpu`), checks those
# settings in its `config.pbtxt`, and plays traffic through an **emulated engine cache** to show which request
# pays a build; all of that runs everywhere. **What runs where:** no engine is built by this notebook. On a GPU
# node, notebook 04's Triton builds it when it loads `openclip_vit_b32_trt` (the commands below watch its log);
# elsewhere the last cell says that no engine could be built here, and why.

# %% tags=["parameters"]
harness = {}              # where this runs: filled by `servelab lab run` ({}: this place's defaults)
trt_max_batch = 64
trt_cache = "/trt_cache"

# %%
from servelab.lab.session import session

lab = session("05b", globals())  # endpoints, model names, results folder and load profile of this run

# %%
from pathlib import Path

from servelab.lab.step import show_commands

step = lab.step

# %% [markdown]
# ## Render the GPU repository (here) and read the TensorRT model's settings
# How the EP decides (ONNX Runtime's TensorRT EP documentation): an engine is valid for one *shape range* per
# dynamic input. Without `trt_profile_min/opt/max_shapes` the EP takes the range from the tensors seen so far;
# with `trt_engine_cache_enable` it stores the engine beside a `.profile` file holding that range, and an input
# outside it widens the range and rebuilds the engine. With the three `trt_profile_*` options the range is
# fixed up front: one build covers every batch in it, and a cached engine is reused while the options match
# the saved `.profile`. A change of model, precision or GPU builds it again.
#
# **Predict first.** A dynamic batcher with `max_batch_size` 64 can hand the model any batch from 1 to 64.
# Without a profile, how many builds could the first hours of traffic trigger, and what does each cost the
# requests in that batch?

# %%
from servelab.triton.models import TRT_ENCODER
from servelab.triton.repository import config_text, parse_config, stage

staged = stage("gpu", out=Path(lab.out_dir) / "models_gpu", max_batch=trt_max_batch, trt_cache=trt_cache)
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
step.answer(f"{ok} of {len(checks)} settings checked above are as one build requires. By the EP's rules (above), "
            "without a profile: one build for the first batch's shape and one more each time a batch lands outside "
            f"the range seen so far, smaller or larger than any before it: up to {trt_max_batch} builds for traffic that "
            "ramps up batch by batch, each taking minutes (the photo-dedup write-ups measured 2–5 min for a first "
            f"start) while the requests in that batch wait. With one profile for batch 1 to {trt_max_batch}: one "
            "build, done at load by the warm-up, and the cache volume makes it a once-per-GPU cost. The emulated "
            "cache below plays it out.")

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
# ## Builds, rebuilds and a cache hit, on an emulated engine cache
# The EP's rules above run on an **emulated engine cache** (`servelab.model.emulated_trt`): stand-in engine
# and `.profile` files, with times taken from the sources printed below, never waited for or measured. The
# traffic is two starts of the model on one cache volume.
#
# **Predict first.** Without a profile, which requests pay an engine build, and what does the restart cost?
# With the staged profile, which ones pay? Write your answer for the first case in `predicted_builds`.

# %%
import pandas as pd

from servelab.model.emulated_trt import EMULATED_TRT, EmulatedTrtCache, TrtTimings, play
from servelab.triton.tensorrt import accelerator_params, staged_profile

traffic = [[1, 4, 4, 8, 2, 8, 16], [8, 16, 32]]  # each request's batch: the first start, then a restart
predicted_builds = []  # your prediction without a profile: (start, request) pairs, e.g. [(1, 1), (2, 3)]

staged_cfg = parse_config(trt_config)
timings, trt_profile = TrtTimings.default(), staged_profile(staged_cfg)
traffic = [[min(b, trt_profile[2]) for b in start] for start in traffic]  # the batcher never forms more
print(f"{EMULATED_TRT}: {timings.source}")
played = {}
for options, prof in (("no profile", None), ("profile {}..{} (opt {})".format(*trt_profile[::2], trt_profile[1]), trt_profile)):
    cache = EmulatedTrtCache(Path(lab.out_dir) / "trt-cache-emulated" / options.split()[0], timings=timings,
                             prefix=accelerator_params(staged_cfg)["trt_engine_cache_prefix"])
    played[options] = play(cache, traffic, prof)
print("cache folder:", cache.files())
cache_table = step.table(pd.DataFrame([{"options": k, **row} for k, rows in played.items() for row in rows]),
                         "trt_cache_emulated", f"{EMULATED_TRT} (an emulation: no engine built, times from the sources "
                         "above, not measured)", measured=False)

# %%
def builds(rows):
    """(start, request) of each request that paid a build or rebuild."""
    return [(r["start"], int(r["step"].split()[1])) for r in rows if r["step"] != "load" and "build" in r["action"]]


def seconds(rows, *actions):
    return sum(r["emulated_s"] for r in rows if r["action"] in actions)


bare, staged = played.values()
paid = builds(bare)
restart = next(r for r in bare if r["start"] == 2 and r["step"] == "load")
after = [q for s_, q in paid if s_ == 2]
step.answer(
    f"Without a profile, {len(paid)} requests paid a build: {', '.join(f'start {s_} request {q}' for s_, q in paid)}, "
    f"{seconds(bare, 'build', 'rebuild'):,.0f} s of emulated build time spent while requests waited. The restart did "
    f"`{restart['action']}` ({restart['emulated_s']:.0f} s emulated)"
    + (f", and {len(after)} of its requests still paid a rebuild (a batch outside the saved range). " if after else ". ")
    + f"With the staged profile, {len(builds(staged))} requests paid one: the engine was built once at load "
      f"({seconds(staged[:1], 'build'):,.0f} s emulated, before any user request) and the restart did "
      f"`{next(r for r in staged if r['start'] == 2)['action']}`. Your prediction: "
    + (f"{predicted_builds}, {'exactly the requests that paid' if sorted(predicted_builds) == paid else 'compare it with the list above'}."
       if predicted_builds else "none written."))

# %% [markdown]
# ## On the GPU node
# The first load builds the engine (minutes); the second start finds it in the cache volume. The engine
# files in `/trt_cache` start with `openclip_` and the export's sha256, so other weights get their own.

# %%
show_commands("node",
              "docker compose -f docker/compose.04-triton.yaml up -d",
              "docker compose -f docker/compose.04-triton.yaml logs -f triton   # first start: engine build",
              "docker compose -f docker/compose.04-triton.yaml exec triton ls -la /trt_cache   # engines + timing cache",
              "docker compose -f docker/compose.04-triton.yaml restart triton     # second start: loads the cached engine")

# %% [markdown]
# ## Why TensorRT is faster, and compared with the source material
# A ViT is a chain of small operations around big matrix products. ONNX Runtime's CUDA EP launches a kernel
# for most of them and writes every intermediate tensor to GPU memory; TensorRT fuses such chains into single
# kernels, runs them in fp16 on the Tensor Cores, and picks each kernel by timing it on the GPU at hand. The
# **photo-dedup "Technical Deep-Dive"** measured 31.1 ms with the CUDA EP against 4.7 ms with TensorRT on an
# RTX A4000, cosine above 0.999 to fp32; on the A100 one comparison caught ~1,658 ms while an engine was still
# compiling, the failure the cache and profile here prevent. No figure in this notebook comes from a TensorRT
# engine. See `SOURCES.md`; the H100 reference (`reference/nvidia-h100-80gb-hbm3/`) had no TensorRT either.

# %%
import onnxruntime as ort

providers_here = ort.get_available_providers()
if lab.place == "node":
    step.not_run("engine build timing", "this notebook checks configuration; on the GPU node the engine is built by "
                 "Triton in notebook 04's stack when it loads the TensorRT model, not by this notebook",
                 "watch the build with the commands above (`docker compose logs triton`); measure the engine with "
                 "`--only 04 --only 07 --param triton_model=openclip_vit_b32_trt`")
else:
    why_not = ("the TensorRT EP is compiled into this ONNX Runtime, but the lab builds engines only in the GPU node's "
               "Triton" if "TensorrtExecutionProvider" in providers_here else
               "this machine's ONNX Runtime offers " + ", ".join(providers_here) + " and no TensorRT execution "
               "provider (it needs an NVIDIA GPU and TensorRT)")
    step.not_run("TensorRT engine build, cache reuse and fp16 throughput", why_not + ", so no engine could be built here",
                 "the engine-cache configuration was rendered and checked")
passed, total = int(checks["ok"].sum()), len(checks)
step.shows(f"{passed} of {total} TensorRT settings in the generated `{TRT_ENCODER}` config are as the deployment "
           f"needs them (profile up to batch {trt_max_batch}, caches under `{trt_cache}`)."
           + ("" if passed == total else " The failing rows above name what to fix in servelab/triton/staging/gpu.")
           + f" On the {EMULATED_TRT} (an emulation, not a TensorRT measurement), the same traffic made "
             f"{len(builds(bare))} requests wait for a build without a profile and {len(builds(staged))} with it.")
