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
# # 04 · Triton and dynamic batching
#
# A model is fastest on big batches, but clients send one photo at a time. **Dynamic batching** lets the
# server hold requests for up to `max_queue_delay_microseconds` and run them as one batch. This notebook
# compares the PyTorch model (in-process, and behind servelab's FastAPI service) with Triton Inference Server
# serving the same network through ONNX Runtime, first by batch size, then under concurrent batch-1 load,
# and reads from Triton's own statistics how big the batches it actually executed were.
#
# What to look for: throughput rising with batch size until the hardware saturates; under concurrency,
# Triton's *average executed batch* growing above 1 — that is dynamic batching at work — and what it costs
# in p50 latency.

# %% tags=["parameters"]
target = "local"          # local | gpu
out_dir = "../results/interactive"
service_url = "http://127.0.0.1:8002"
triton_http_url = "http://127.0.0.1:8003"
triton_model = "openclip_vit_b32_cpu"
triton_pid = 0
batch_sizes = [1, 4]
concurrency_levels = [1, 4]
duration_s = 0.4
warmup_s = 0.0
repeats = 1
requests = 2              # > 0: a fixed request count per point (smoke); 0: duration_s windows
extra_servers = False     # start a torch-engine FastAPI service for the comparison (else: this run's onnx service)
service_pid = 0

# %%
from servelab.bench.experiments import batch_sweep, concurrency_sweep, measure_served
from servelab.lab.nb import Step
from servelab.lab.targets import attach

step = Step("04", out_dir, target)
opts = step.opts(duration_s, warmup_s, repeats, requests)
triton = attach("triton-http", triton_http_url, payload="tensor", model=triton_model, pid=triton_pid or None)
cols = ["target", "engine", "batch", "concurrency", "throughput_img_s", "latency_p50_ms", "latency_p99_ms",
        "server.avg_batch", "stable"]

# %% [markdown]
# ## By batch size: PyTorch in-process vs Triton (one client, batch-N requests)

# %%
torch_batches = batch_sweep(step.run, target="in-process", engine="torch", batches=tuple(batch_sizes), opts=opts)
triton_batches = [measure_served(step.run, "04-triton-batch", triton, payload="tensor", batch=b, concurrency=1, opts=opts)
                  for b in batch_sizes]
by_batch = step.table(step.frame(torch_batches + triton_batches, *cols), "by_batch",
                      "PyTorch (in-process) vs Triton by batch size, concurrency 1")

# %% [markdown]
# ## Under concurrency: batch-1 requests from N clients
# PyTorch behind servelab's FastAPI service (started for this measurement with the torch engine) against
# Triton. `server.avg_batch` is read from each server's own counters.

# %%
if extra_servers:
    service_conc = concurrency_sweep(step.run, target="fastapi", engine="torch", concurrencies=tuple(concurrency_levels),
                                     opts=opts)
else:
    step.not_run("PyTorch-engine FastAPI service", "extra_servers=False (smoke profile)",
                 "this run's FastAPI service (ONNX Runtime engine) stands in")
    service = attach("fastapi", service_url, payload="tensor", pid=service_pid or None)
    service_conc = [measure_served(step.run, "04-service-concurrency", service, payload="tensor", batch=1,
                                   concurrency=c, opts=opts) for c in concurrency_levels]

# %%
triton_conc = [measure_served(step.run, "04-triton-concurrency", triton, payload="tensor", batch=1, concurrency=c,
                              opts=opts) for c in concurrency_levels]
by_conc = step.table(step.frame(service_conc + triton_conc, *cols), "by_concurrency",
                     "FastAPI service vs Triton under concurrent batch-1 requests")

# %% [markdown]
# ### Exercise: read the table
# Many clients each send one photo at a time. Which of the two servers measured above would you deploy
# for that load? Answer from the table, not from what you expect.

# %% tags=["exercise"]
# Exercise 04.1: choose the server for many concurrent single-photo clients
def best_server(by_conc):
    """The `target` with the highest throughput_img_s at the highest concurrency measured in by_conc."""
    # BEGIN SOLUTION
    loaded = by_conc[by_conc["concurrency"] == by_conc["concurrency"].max()]
    return loaded.loc[loaded["throughput_img_s"].idxmax(), "target"]
    # END SOLUTION


# %%
from servelab.assignments import checks

checks.best_choice(best_server, by_conc, key="target", metric="throughput_img_s",
                   at={"concurrency": max(concurrency_levels)}, exercise="04.1", step=step)

# %% [markdown]
# ### Exercise: configure dynamic batching yourself
# Triton reads its batching policy from the model's `config.pbtxt`. Write the two stanzas for this model:
# `dynamic_batching` with preferred batch sizes no larger than the model's `max_batch_size` (read below
# from the running server) and a queue delay of 2 ms, and an `instance_group` with two instances of the
# kind this target runs on (`KIND_CPU` here, `KIND_GPU` on the GPU node).
# The check parses your text into Triton's own `ModelConfig` protobuf, as the server would.

# %%
from servelab.triton.control import get_config

max_batch = int(get_config(triton_http_url, triton_model)["max_batch_size"])
instance_kind = "KIND_GPU" if target == "gpu" else "KIND_CPU"
print(f"{triton_model}: max_batch_size {max_batch}; instances of kind {instance_kind}")

# %% tags=["exercise"]
# Exercise 04.2: write the dynamic_batching and instance_group stanzas
def triton_stanzas(max_batch):
    """config.pbtxt text: dynamic batching (preferred sizes up to max_batch, 2 ms queue delay) and two
    instances of kind `instance_kind`."""
    # BEGIN SOLUTION
    preferred = sorted({size for size in (4, 8, max_batch) if size <= max_batch})
    return (f"dynamic_batching {{ preferred_batch_size: {preferred} max_queue_delay_microseconds: 2000 }}\n"
            f"instance_group [ {{ kind: {instance_kind} count: 2 }} ]\n")
    # END SOLUTION


# %%
checks.batching_stanza(triton_stanzas, max_batch=max_batch, kind=instance_kind, count=2, max_delay_us=2000,
                       exercise="04.2", step=step)

# %%
from servelab.bench.report import plot_batch_histogram, plot_latency_throughput

step.show_plot(plot_latency_throughput(service_conc + triton_conc, step.plot_path("latency_vs_throughput")))
step.show_plot(plot_batch_histogram(triton_conc, step.plot_path("batch_sizes")))

# %%
t = by_conc[by_conc["target"].str.startswith("triton")].sort_values("concurrency")
p = by_conc[by_conc["target"] == "fastapi"].sort_values("concurrency")
lo, hi = t.iloc[0], t.iloc[-1]
step.shows(
    f"Triton went from {lo['throughput_img_s']:.1f} img/s at concurrency {lo['concurrency']} to "
    f"{hi['throughput_img_s']:.1f} img/s at concurrency {hi['concurrency']}, executing batches of "
    f"{hi['server.avg_batch']:.1f} images on average there (p50 {lo['latency_p50_ms']:.0f} → {hi['latency_p50_ms']:.0f} ms). "
    f"The FastAPI service ({p.iloc[-1]['engine']} engine) reached {p.iloc[-1]['throughput_img_s']:.1f} img/s at concurrency {p.iloc[-1]['concurrency']}; "
    f"in-process PyTorch peaked at {by_batch[by_batch['engine'] == 'torch']['throughput_img_s'].max():.1f} img/s "
    f"over batch sizes {batch_sizes}."
)
