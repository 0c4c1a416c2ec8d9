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
# # 01 · The client/service split
#
# The photo finder needs embeddings; where the model runs is a deployment decision. `InferenceClient` hides
# it: `mode="local"` runs the ONNX engine in this process, `mode="remote"` sends the photo to a server
# (here servelab's FastAPI service), and `mode="auto"` uses the server when it answers ready and says so
# when it falls back to local.
#
# What to look for: the same photo gives the **same embedding** on both sides (one preprocessing
# implementation), and what the network hop and the server's micro-batcher cost or gain at each batch size.

# %% tags=["parameters"]
target = "local"          # local | gpu
out_dir = "../results/interactive"
service_url = "http://127.0.0.1:8002"
service_pid = 0
batch_sizes = [1, 2]
duration_s = 0.4
warmup_s = 0.0
repeats = 1
requests = 2              # > 0: a fixed request count per point (smoke); 0: duration_s windows
n_photos = 12

# %%
import numpy as np
import pandas as pd

from servelab.client import InferenceClient
from servelab.data import encode, synthetic_photo
from servelab.lab.nb import Step

step = Step("01", out_dir, target)
photos = [encode(synthetic_photo(seed)) for seed in range(n_photos)]  # generated JPEGs, never downloaded

# %% [markdown]
# ## Same photo, same embedding — in-process and over HTTP

# %%
with InferenceClient(mode="local") as local, InferenceClient(mode="remote", backend="fastapi", url=service_url) as remote:
    # in chunks of 16: a request carries at most SERVELAB_MAX_IMAGES (32) images
    e_local, e_remote = local.embed_paths(photos, batch_size=16, progress=False), remote.embed_paths(photos, batch_size=16, progress=False)
cos = np.sum(e_local * e_remote, axis=1)
parity = step.table(pd.DataFrame([{"photos": len(photos), "min cosine local vs service": f"{cos.min():.6f}",
                                   "weights (local)": local.weights, "weights (service)": remote.weights}]),
                    "parity", "Embeddings of the same JPEGs, in-process vs the FastAPI service")

# %% [markdown]
# ## `auto` mode: a server that is not there
# Port 9 on loopback has nothing listening, so `auto` falls back to the in-process engine — and says why.

# %%
with InferenceClient(mode="auto", backend="fastapi", url="http://127.0.0.1:9") as auto:
    auto.embed_images(photos[:1])
    print(auto.mode_used, "—", auto.fallback_reason)

# %% [markdown]
# ## What the hop costs: in-process engine vs the service, by batch size
# Closed loop, one request at a time (concurrency 1), `duration_s` per point after `warmup_s` of warm-up.
# The same float32 tensors go to both, so the difference is the hop: serialisation, HTTP, the micro-batcher.

# %%
from servelab.bench.experiments import batch_sweep, measure_served
from servelab.lab.targets import attach

opts = step.opts(duration_s, warmup_s, repeats, requests)
local_recs = batch_sweep(step.run, target="in-process", engine="onnx", batches=tuple(batch_sizes), opts=opts)
service = attach("fastapi", service_url, payload="tensor", pid=service_pid or None)
service_recs = [measure_served(step.run, "01-service-batch", service, payload="tensor", batch=b, concurrency=1, opts=opts)
                for b in batch_sizes]
hop = step.table(step.frame(local_recs + service_recs, "target", "engine", "batch", "throughput_img_s", "latency_p50_ms",
                            "latency_p99_ms", "memory.rss_mb"), "local_vs_service",
                 "In-process engine vs the FastAPI service, by batch size (concurrency 1)")

# %% [markdown]
# ### Exercise: what does the hop cost?
# From the table above: how many milliseconds did going through the service add to the median latency of
# a single-image request, compared with running the engine in this process? (It can come out negative:
# the service's engine runs in another process, with its own threads.)

# %% tags=["exercise"]
# Exercise 01.1: compute what the service adds to p50 latency at the smallest batch
def hop_cost_ms(hop):
    """latency_p50_ms of target "fastapi" minus that of "in-process", at the smallest batch in `hop` (ms)."""
    # BEGIN SOLUTION
    smallest_batch = hop[hop["batch"] == hop["batch"].min()].set_index("target")["latency_p50_ms"]
    return float(smallest_batch["fastapi"] - smallest_batch["in-process"])
    # END SOLUTION


# %%
from servelab.assignments import checks

checks.difference(hop_cost_ms, hop, key="target", a="fastapi", b="in-process", metric="latency_p50_ms",
                  at={"batch": min(batch_sizes)}, exercise="01.1", step=step)

# %%
p50 = hop.pivot_table(index="batch", columns="target", values="latency_p50_ms")
extra = (p50["fastapi"] - p50["in-process"])
step.shows(
    f"Embeddings matched across the split (minimum cosine {cos.min():.6f} over {len(photos)} photos). "
    f"Going through the service added {extra.iloc[0]:+.1f} ms to the p50 at batch {extra.index[0]} and "
    f"{extra.iloc[-1]:+.1f} ms at batch {extra.index[-1]} (in-process p50 {p50['in-process'].iloc[0]:.0f} ms → service "
    f"{p50['fastapi'].iloc[0]:.0f} ms). `auto` mode fell back to {auto.mode_used} when the server was missing."
)
