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
# # 07 · gRPC vs HTTP
#
# Triton speaks both KServe v2 over HTTP/REST and gRPC. With binary tensors on both, the difference is the
# transport: HTTP/1.1 with a JSON header plus binary body vs HTTP/2 with protobuf framing. This notebook
# measures both against the same Triton model, by batch size (one client) and by concurrency (batch-1).
#
# What to look for: at large payloads (big batches) the bytes dominate and the protocols converge; at
# batch 1 under concurrency, per-request overhead shows.

# %% tags=["parameters"]
place = ""                # local | node ("": $SERVELAB_PLACE, else local)
out_dir = ""              # "": results/interactive in this checkout
triton_http_url = ""      # "": the place's Triton HTTP (local :8003, node :8000)
triton_grpc_url = ""      # "": the place's Triton gRPC (local :8004, node :8001)
triton_model = ""         # "": the place's encoder (openclip_vit_b32_cpu | openclip_vit_b32)
triton_pid = 0
batch_sizes = [1, 2]
concurrency_levels = [1, 2]
duration_s = 0.4
warmup_s = 0.0
repeats = 1
requests = 2              # > 0: a fixed request count per point (smoke); 0: duration_s windows

# %%
from servelab.lab.places import place_defaults

globals().update(place_defaults(globals()))  # "" parameters -> this place's endpoints, model names, out_dir

# %%
from servelab.bench.experiments import measure_served
from servelab.lab.nb import Step
from servelab.lab.places import attach

step = Step("07", out_dir, place)
opts = step.opts(duration_s, warmup_s, repeats, requests)
protocols = {
    "http": attach("triton-http", triton_http_url, payload="tensor", model=triton_model, pid=triton_pid or None),
    "grpc": attach("triton-grpc", triton_grpc_url, payload="tensor", model=triton_model, pid=triton_pid or None,
                   stats_url=triton_http_url),
}
cols = ["protocol", "batch", "concurrency", "throughput_img_s", "latency_p50_ms", "latency_p99_ms", "server.avg_request_ms"]

# %% [markdown]
# ## By batch size (one client)

# %%
recs = [measure_served(step.run, "07-protocol-batch", srv, payload="tensor", batch=b, concurrency=1, opts=opts)
        for b in batch_sizes for srv in protocols.values()]
by_batch = step.table(step.frame(recs, *cols), "by_batch", "gRPC vs HTTP by batch size (binary tensors, concurrency 1)")

# %% [markdown]
# ### Exercise: read the speed-up off the table
# With one client sending the largest batches measured, how many times the HTTP throughput did gRPC
# deliver? (Above 1: gRPC faster; below 1: slower.)

# %% tags=["exercise"]
# Exercise 07.1: compute gRPC's throughput relative to HTTP at the largest batch
def grpc_over_http(by_batch):
    """throughput_img_s of protocol "grpc" divided by that of "http", at the largest batch in by_batch."""
    # BEGIN SOLUTION
    largest = by_batch[by_batch["batch"] == by_batch["batch"].max()].set_index("protocol")["throughput_img_s"]
    return float(largest["grpc"] / largest["http"])
    # END SOLUTION


# %%
from servelab.assignments import checks

checks.speedup(grpc_over_http, by_batch, key="protocol", fast="grpc", slow="http", metric="throughput_img_s",
               at={"batch": max(batch_sizes)}, exercise="07.1", step=step)

# %% [markdown]
# ## By concurrency (batch-1 requests)

# %%
recs = [measure_served(step.run, "07-protocol-concurrency", srv, payload="tensor", batch=1, concurrency=c, opts=opts)
        for c in concurrency_levels for srv in protocols.values()]
by_conc = step.table(step.frame(recs, *cols), "by_concurrency", "gRPC vs HTTP by concurrency (batch 1)")

# %% [markdown]
# ### Exercise: the protocol for many small requests
# A fleet of clients sends single photos concurrently and you care about the tail. Which protocol kept
# p99 lower at the highest concurrency measured?

# %% tags=["exercise"]
# Exercise 07.2: choose the protocol with the lower p99 under concurrency
def lower_tail_protocol(by_conc):
    """The `protocol` with the lowest latency_p99_ms at the highest concurrency in by_conc."""
    # BEGIN SOLUTION
    busiest = by_conc[by_conc["concurrency"] == by_conc["concurrency"].max()]
    return busiest.loc[busiest["latency_p99_ms"].idxmin(), "protocol"]
    # END SOLUTION


# %%
checks.best_choice(lower_tail_protocol, by_conc, key="protocol", metric="latency_p99_ms", mode="min",
                   at={"concurrency": max(concurrency_levels)}, exercise="07.2", step=step)

# %%
def ratio(df, key):
    p = df.pivot_table(index=key, columns="protocol", values="throughput_img_s")
    return (p["grpc"] / p["http"]).round(3)


rb, rc = ratio(by_batch, "batch"), ratio(by_conc, "concurrency")
step.table(rb.rename("grpc_over_http_throughput").reset_index(), "ratio_by_batch", "gRPC ÷ HTTP throughput by batch")
step.shows(
    f"gRPC ÷ HTTP throughput ranged from {rb.min():.2f} to {rb.max():.2f} across batch sizes {batch_sizes} and from "
    f"{rc.min():.2f} to {rc.max():.2f} across concurrency {concurrency_levels}; "
    + ("on this machine the two are within 10 % everywhere — compute, not transport, dominates."
       if max(abs(rb - 1).max(), abs(rc - 1).max()) < 0.10 else
       f"the largest gap was at {'batch ' + str(abs(rb - 1).idxmax()) if abs(rb - 1).max() >= abs(rc - 1).max() else 'concurrency ' + str(abs(rc - 1).idxmax())}.")
)
