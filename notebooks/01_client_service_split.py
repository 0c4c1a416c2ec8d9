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
batch_sizes = [1, 4]
duration_s = 0.4
warmup_s = 0.1
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
    e_local, e_remote = local.embed_images(photos), remote.embed_images(photos)
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
