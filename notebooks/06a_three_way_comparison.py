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
# # 06a · Three-way comparison: FastAPI service, LitServe, Triton
#
# Three ways to put the same ONNX Runtime engine behind HTTP, sent the same requests (one JPEG per request,
# decoded by the server: servelab's multipart upload, LitServe's base64 JSON, Triton's JPEG ensemble):
#
# - **servelab's FastAPI service** with its own micro-batcher;
# - **LitServe**, the batching Python server people reach for instead (peer baseline);
# - **Triton Inference Server** with dynamic batching.
#
# Then a breakdown of where a request's time goes: what the client waited, what the server says it spent
# queueing and computing (Triton's statistics), and the rest — transport, HTTP handling and decoding.

# %% tags=["parameters"]
target = "local"          # local | gpu
out_dir = "../results/interactive"
service_url = "http://127.0.0.1:8002"
triton_http_url = "http://127.0.0.1:8003"
triton_model = "openclip_vit_b32_cpu"
triton_jpeg_model = "openclip_vit_b32_jpeg"
service_pid = 0
triton_pid = 0
concurrency_levels = [1, 2]
extra_servers = False     # start LitServe for the comparison
duration_s = 0.4
warmup_s = 0.0
repeats = 1
requests = 2              # > 0: a fixed request count per point (smoke); 0: duration_s windows

# %%
from servelab.bench.experiments import measure_served
from servelab.bench.targets import served
from servelab.lab.nb import Step
from servelab.lab.targets import attach

step = Step("06a", out_dir, target)
opts = step.opts(duration_s, warmup_s, repeats, requests)
cols = ["target", "payload", "concurrency", "throughput_img_s", "latency_p50_ms", "latency_p99_ms", "latency_mean_ms",
        "server.avg_batch", "memory.rss_mb", "stable"]


def sweep(srv, payload="jpeg"):
    return [measure_served(step.run, "06a-three-way", srv, payload=payload, batch=1, concurrency=c, opts=opts)
            for c in concurrency_levels]


# %% [markdown]
# ## Same requests, three servers

# %%
recs = sweep(attach("fastapi", service_url, payload="jpeg", pid=service_pid or None))
recs += sweep(attach("triton-http", triton_http_url, payload="jpeg", model=triton_model, jpeg_model=triton_jpeg_model,
                     pid=triton_pid or None))
if extra_servers:
    with served("litserve", engine="onnx", log_path=step.out_dir / "logs" / "litserve.log") as litserve:
        recs += sweep(litserve)
else:
    step.not_run("LitServe peer baseline", "extra_servers=False (smoke profile)", "FastAPI service and Triton compared")
three_way = step.table(step.frame(recs, *cols), "three_way", "Three servers, batch-1 JPEG requests")

# %% [markdown]
# ### Exercise: pick the backend
# The photo finder sends one JPEG per request from many workers at once. Which server measured above
# would you put behind it?

# %% tags=["exercise"]
# Exercise 06a.1: choose the backend for many concurrent JPEG clients
def best_backend(three_way):
    """The `target` with the highest throughput_img_s at the highest concurrency measured."""
    # BEGIN SOLUTION
    busiest = three_way[three_way["concurrency"] == three_way["concurrency"].max()]
    return busiest.loc[busiest["throughput_img_s"].idxmax(), "target"]
    # END SOLUTION


# %%
from servelab.assignments import checks

checks.best_choice(best_backend, three_way, key="target", metric="throughput_img_s",
                   at={"concurrency": max(concurrency_levels)}, exercise="06a.1", step=step)

# %%
from servelab.bench.report import plot_latency_throughput, plot_server_breakdown

step.show_plot(plot_latency_throughput(recs, step.plot_path("three_way")))

# %% [markdown]
# ## Where the time goes (Triton, binary tensors to the encoder)
# Triton reports, per request, the time spent waiting in the scheduler queue and in compute (input copy,
# inference, output copy). The client's mean latency minus the server's request time is everything
# outside the server: serialisation, the network stack, HTTP parsing.

# %%
tensor_recs = sweep(attach("triton-http", triton_http_url, payload="tensor", model=triton_model, pid=triton_pid or None),
                    payload="tensor")
b = step.frame(tensor_recs, "concurrency", "latency_mean_ms", "server.avg_request_ms", "server.avg_queue_ms",
               "server.avg_compute_input_ms", "server.avg_compute_infer_ms", "server.avg_compute_output_ms")
b["server_compute_ms"] = b[["server.avg_compute_input_ms", "server.avg_compute_infer_ms", "server.avg_compute_output_ms"]].sum(axis=1)
b["outside_server_ms"] = b["latency_mean_ms"] - b["server.avg_request_ms"]
breakdown = step.table(b.rename(columns={"latency_mean_ms": "client_mean_ms", "server.avg_request_ms": "server_request_ms",
                                         "server.avg_queue_ms": "server_queue_ms"})
                       [["concurrency", "client_mean_ms", "server_request_ms", "server_queue_ms", "server_compute_ms",
                         "outside_server_ms"]].round(2), "breakdown",
                       "Client latency vs server queue and compute vs the rest (Triton statistics)")

# %% [markdown]
# ### Exercise: how much of the wait is outside the server?
# Before tuning the model, find out whether the server is where the time goes.

# %% tags=["exercise"]
# Exercise 06a.2: compute the share of client latency spent outside the server
def outside_share(breakdown):
    """At the highest concurrency measured: the fraction (0…1) of the client's mean latency spent outside
    Triton (outside_server_ms of client_mean_ms)."""
    # BEGIN SOLUTION
    busiest = breakdown[breakdown["concurrency"] == breakdown["concurrency"].max()].iloc[0]
    return float(busiest["outside_server_ms"] / busiest["client_mean_ms"])
    # END SOLUTION


# %%
checks.share(outside_share, breakdown, part="outside_server_ms", whole="client_mean_ms",
             at={"concurrency": max(concurrency_levels)}, exercise="06a.2", step=step)

# %%
step.show_plot(plot_server_breakdown(tensor_recs, step.plot_path("server_breakdown")))

# %%
hi_c = max(concurrency_levels)
top = three_way[three_way["concurrency"] == hi_c].sort_values("throughput_img_s", ascending=False)
lead, last = top.iloc[0], top.iloc[-1]
r = breakdown[breakdown["concurrency"] == hi_c].iloc[0]
step.shows(
    f"At concurrency {hi_c}, **{lead['target']}** served the most: {lead['throughput_img_s']:.1f} img/s "
    f"(p99 {lead['latency_p99_ms']:.0f} ms), against {last['throughput_img_s']:.1f} img/s for {last['target']}; "
    f"{len(top)} servers compared. In Triton, a request's {r['client_mean_ms']:.0f} ms (client mean) split into "
    f"{r['server_queue_ms']:.0f} ms queueing, {r['server_compute_ms']:.0f} ms compute and "
    f"{r['outside_server_ms']:.0f} ms outside the server."
)
