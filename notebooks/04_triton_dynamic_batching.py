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
# Stuck on an error? [When something goes wrong](../docs/TROUBLESHOOTING.md) has the messages and their fixes.
# How a measurement is read here (windows, drift, alternating windows, and when a lead is ranked): [How this lab reads a measurement](../docs/METHOD.md).
#
# **After this notebook you can**
# - read a Triton model repository (`config.pbtxt` + a python-backend `model.py`) and say what each stanza does;
# - call Triton by hand with `tritonclient` — `InferInput`, `set_data_from_numpy`, binary vs JSON tensors;
# - read Triton's statistics endpoint before and after a load, and work out the average executed batch;
# - edit a model's `config.pbtxt` and load it into the running Triton with one repository-API request;
# - measure a point with NVIDIA's `perf_analyzer` and read its output next to servelab's own;
# - switch Triton's request trace on at runtime and draw it: requests grouped into the executions that ran them;
# - predict, from one compute time, how long a request waits at concurrency N, and check it against the run;
# - explain when dynamic batching pays (many waiting single-image requests, hardware with idle parallelism)
#   and when it cannot (a CPU that batch 1 already saturates), and why in-process PyTorch still gains from a
#   batch on the same CPU.
#
# A model is most efficient on big batches, but clients send one photo at a time. **Dynamic batching** lets the
# server take several waiting requests from its queue and run them as one batch. This notebook measures the
# same ViT-B/32 network three ways: PyTorch in this process, servelab's FastAPI service (which has its own
# micro-batcher), and Triton — by batch size with one client, then under concurrent single-image clients.
#
# ```mermaid
# flowchart LR
#   C1[client 1] -->|batch-1 request| Q
#   C2[client 2] -->|batch-1 request| Q
#   CN[client N] -->|batch-1 request| Q
#   subgraph T[tritonserver]
#     Q[(scheduler queue<br/>dynamic_batching)] -->|up to max_batch_size<br/>requests at once| I[model instance<br/>python backend: model.py]
#     I -->|one session.run| ORT[ONNX Runtime<br/>CPU, all cores]
#   end
# ```
#
# **Honest framing for this machine.** The tritonserver bundled with the `nvidia-pytriton` wheel has only the
# *python* backend, so locally Triton runs `model.py`, which calls ONNX Runtime — not Triton's optimised
# onnxruntime backend that a GPU node uses. Client and server share the same two CPU cores over loopback,
# so there is no network cost here. And ONNX Runtime already uses every core for a single image: batch 1
# saturates this CPU, so a bigger batch mostly costs proportionally more time. On a GPU, batch 1 leaves most
# of the device idle, and batching fills it — that is where the course's GPU figures come from.

# %% tags=["parameters"]
harness = {}              # where this runs: filled by `servelab lab run` ({}: this place's defaults)
batch_sizes = [1, 8]
concurrency_levels = [1, 8]
device_profile = "vit-b32-h100"  # the emulated accelerator's profile (servelab.model.device_profile), or a *.json file

# %%
from servelab.lab.session import session

lab = session("04", globals())  # endpoints, model names, results folder and load profile of this run

# %%
import contextlib

from servelab.bench.experiments import Side, ab, batch_sweep, concurrency_sweep
from servelab.bench.servers import served
from servelab.lab.places import in_process_note, in_process_provider

step = lab.step
opts = lab.load
triton = lab.attach("triton-http")
# where Triton computes, as the server itself reports it (its loaded config names the GPUs it runs on)
triton_hw = "the server's GPU" if triton.gpus else ("this CPU" if lab.place != "node" else "the server's CPU")
cols = ["server", "engine", "batch", "concurrency", "throughput_img_s", "throughput_min_img_s", "throughput_max_img_s",
        "latency_p50_ms", "latency_p99_ms", "server_stats.avg_batch", "stable"]

# %% [markdown]
# ## The code Triton runs
# Triton serves what its **model repository** says. The lab staged this run's repository from
# the templates in `servelab/triton/staging/cpu`; here is the encoder's `config.pbtxt` as the running server loaded it — name,
# backend, `max_batch_size`, the tensors, the `dynamic_batching` stanza and the `instance_group`:

# %%
from pathlib import Path

import pandas as pd

from servelab.lab.step import show_code
from servelab.triton.repository import STAGING

repository = Path(lab.triton_repository)
if not (repository / lab.triton_model).is_dir():  # not this machine's Triton (e.g. the node's): read its template
    repository = next(STAGING / f for f in ("gpu", "cpu") if (STAGING / f / lab.triton_model).is_dir())
show_code(repository / lab.triton_model / "config.pbtxt", lang="protobuf")

# %% [markdown]
# On the CPU model, the `parameters` at the end are read by the python model, not by Triton: how many threads
# ONNX Runtime uses and whether they busy-wait between runs (`intra_op_spinning`, left at ONNX Runtime's
# default as in the other engines; the GPU model runs on Triton's own onnxruntime backend and has neither).
#
# What the config *leaves out* is there because of a measurement. An earlier version bounded the queue
# (`default_queue_policy { max_queue_size: 64 … }`, so that overload is refused at once). With it, one client
# sending batch-1 requests back to back saw a few percent of them take about half a second instead of tens of
# milliseconds, and Triton's statistics put that time in the *queue*, with nothing else queued; at
# concurrency 8 the instance sat idle for up to half a second about twice a minute. Triton's verbose log
# (`--log-verbose=1`) showed the request leave the queue exactly 500 ms after it arrived: the dynamic
# batcher's idle timer. Triton's source explains it. An arriving request wakes the batcher only if an
# instance is free at that instant, and nothing wakes it when an instance *becomes* free; a request that
# lands in the moment between the answer going out and the instance being ready again sleeps until the timer
# fires. With the queue unbounded (and no queue timeouts), Triton's default, the batcher does not need that
# wake-up: it forms the next batch while the instance is still busy and hands it over as soon as the instance
# is free. A bound turns that off. Measured on a 2-core VM while this lesson was written, 25 s of
# back-to-back batch-1 requests, twice: with the bound 4 and 18 half-second stalls, without it none; at
# concurrency 8, five 20–30 s windows with the bound left the instance idle 5 times for 0.36–0.51 s, six
# without it not once. So this lab leaves the queue unbounded, and `servelab bench overload` reloads the model
# with the bound when it measures shedding (where requests arrive all the time, so the batcher is never left
# waiting). To see the stalls yourself, reload the model with a bound
# (`servelab triton reconfigure openclip_vit_b32_cpu --max-queue 64`) and send a few hundred requests one after
# another.

# %% [markdown]
# And the python-backend `execute` it calls. Triton hands it a *list* of requests — when the dynamic
# batcher has collected several, the list is longer than one — and the function concatenates them into one
# ONNX Runtime call. That single `session.run` on a bigger array is the whole of what batching buys.

# %%
model_py = repository / lab.triton_model / "1" / "model.py"
if model_py.is_file():
    show_code(model_py, "def execute", "def finalize")
else:
    print(f"{lab.triton_model} has no model.py: it runs on Triton's onnxruntime backend, which batches the same way in C++")

# %% [markdown]
# ## One request by hand: `tritonclient`, binary vs JSON
# Before the harness takes over, the raw call. A request names the model, and each input tensor gets an
# `InferInput` (name, shape, datatype) filled by `set_data_from_numpy`. With `binary_data=True` the 602 KB
# of float32 travel as raw bytes after a small JSON header; with `binary_data=False` every float becomes
# decimal text in the JSON body.
#
# **Predict first.** One preprocessed photo is 3×224×224 float32 values. How many times larger is the JSON
# body than the binary one, and will the served latency (the whole round trip, not just encoding) differ by
# more than the run-to-run noise?

# %%
import tritonclient.http as httpclient

from servelab.data import synthetic_photo
from servelab.lab import triton_by_hand as by_hand
from servelab.model.preprocess import preprocess_pil

pixels = preprocess_pil(synthetic_photo(0))[None]  # shape (1, 3, 224, 224), float32
client = httpclient.InferenceServerClient(lab.triton_address)
show_code(by_hand.infer_once)
raw_calls = by_hand.raw_calls(client, lab.triton_model, pixels)  # 5 calls each; both encodings, one embedding
step.table(raw_calls.round(1), "raw_call", "One image, 5 calls each: tritonclient binary vs JSON (served round trip)")

# %%
b, j = raw_calls.set_index("encoding").loc["binary"], raw_calls.set_index("encoding").loc["json"]
overlap = j["round_trip_ms_min"] <= b["round_trip_ms_max"]
step.answer(f"The JSON body was {j['request_bytes'] / 1024:,.0f} KiB against {b['request_bytes'] / 1024:,.0f} KiB binary "
            f"({j['request_bytes'] / b['request_bytes']:.1f}× larger; the photo-dedup write-up measured 2,980 vs 588 KB). "
            f"The served round trip took {j['round_trip_ms_median']:.0f} ms with JSON vs {b['round_trip_ms_median']:.0f} ms "
            "binary (median of 5) — "
            + ("the ranges of the five calls overlap, so here that difference is within the noise; the JSON cost is "
               "hidden behind a compute time of this size on "
               f"{triton_hw}."
               if overlap else
               f"the ranges do not overlap: JSON added {j['round_trip_ms_median'] - b['round_trip_ms_median']:.0f} ms "
               "per image for encoding the floats as text, sending it and parsing it on the server."))

# %% [markdown]
# ## By batch size: PyTorch in-process vs Triton (one client, batch-N requests)
#
# **Predict first.** With one client sending batches of N images back to back, how will images per second
# change from batch 1 to the largest batch — roughly N times more (a GPU with idle parallelism), or nearly
# flat (a CPU that batch 1 already keeps busy)? And how will the latency of one request grow?

# %%
torch_provider = in_process_provider(lab.place, "torch")  # at place=node: the node's GPU when this kernel has it
with served("in-process", engine="torch", provider=torch_provider) as torch_engine:
    # the largest batch against the smallest in alternating windows of the same engine: the ratio the summary
    # draws, with the machine's drift hitting both sides alike. Its two sides are also the sweep's end points
    # (`measured=`): each point is measured once and serves both the table and the ratio
    small_b, big_b = min(batch_sizes), max(batch_sizes)
    torch_ab = ab(step.run, "04-torch-batch-ratio", Side(f"batch {big_b}", torch_engine, "tensor", batch=big_b),
                  Side(f"batch {small_b}", torch_engine, "tensor", batch=small_b), opts=opts)
    torch_ratio = torch_ab[-1]
    torch_batches = batch_sweep(step.run, torch_engine, batches=tuple(batch_sizes), opts=opts,
                                experiment="04-torch-batch", measured=torch_ab)
in_process_note(step, lab.place, torch_provider, "the in-process PyTorch rows (by batch size)")
print(f"in-process PyTorch, alternating windows: {step.ratio(torch_ratio)}")
triton_batches = batch_sweep(step.run, triton, batches=tuple(batch_sizes), opts=opts, experiment="04-triton-batch")
by_batch = step.table(step.frame(torch_batches + triton_batches, *cols), "by_batch",
                      "PyTorch (in-process) vs Triton by batch size, concurrency 1")

# %%
from servelab.bench.report import Grade, grade

tb = step.frame(triton_batches, "batch", "throughput_img_s", "latency_p50_ms").sort_values("batch")
small, big = tb.iloc[0], tb.iloc[-1]
gain = big["throughput_img_s"] / small["throughput_img_s"]
graded = grade(gain, margin=step.margin(), target=big["batch"] / small["batch"])  # flat, far from or close to N×
step.answer(f"Triton went from {small['throughput_img_s']:.1f} img/s at batch {int(small['batch'])} to "
            f"{big['throughput_img_s']:.1f} img/s at batch {int(big['batch'])}: {gain:.2f}× for {int(big['batch'] / small['batch'])}× "
            f"the images per request, while one request's p50 grew from {small['latency_p50_ms']:.0f} to "
            f"{big['latency_p50_ms']:.0f} ms ({big['latency_p50_ms'] / big['batch']:.0f} ms per image at the larger batch, "
            f"{small['latency_p50_ms'] / small['batch']:.0f} ms at the smaller). "
            + (f"Nearly flat: {triton_hw} was already busy at batch 1, so a batch costs about its size in time."
               if graded in (Grade.FLAT, Grade.LOSS) else
               f"More images per second, but far from {big['batch'] / small['batch']:.0f}×: batch 1 already kept most "
               f"of {triton_hw} busy, so a batch only fills the part a single image left idle."
               if graded is Grade.FAR_FROM_TARGET else
               "Close to proportional: the hardware had parallelism batch 1 left idle."))

# %% [markdown]
# ## Triton's statistics, by hand
# Triton counts, per model, how many **inferences** (images) it ran and in how many **executions** (calls
# to `execute`); their ratio is the average executed batch. Read the endpoint now, before the measurements,
# as the Chameleon lab does with `curl …/v2/models/<model>/versions/1/stats`:

# %%
show_code(by_hand.ModelCounts.read)
stats_before = by_hand.ModelCounts.read(lab.triton_http_url, lab.triton_model)
print(f"GET {by_hand.ModelCounts.url(lab.triton_http_url, lab.triton_model)}\n{stats_before}")

# %% [markdown]
# ## Under concurrency: batch-1 requests from N clients
# PyTorch behind servelab's FastAPI service (started for this measurement with the torch engine) against
# Triton. `server_stats.avg_batch` is read from each server's own counters. Both batch: Triton with its dynamic
# batcher, the FastAPI service with its micro-batcher (notebook 01 shows its loop).
#
# **Predict first.** Call *t* the compute time Triton reports at concurrency 1. Without batching, a new
# request at concurrency N finds about N−1 requests ahead of it, so its latency is about N·t and throughput
# stays flat. With batches of B it waits about (N−1)/B executions — but on this CPU an execution of B images
# lasts about B·t. Which will the run show at the highest concurrency: latency near N·t, or much lower? And
# what average executed batch will Triton's statistics report?

# %%
# Exercise 04.1 asks you to read this measurement. Write your prediction down first: at the highest
# concurrency, which server delivers more images per second — "fastapi", "triton-http", or "tie" (the two
# within the spread the run measures)? Then run the cells below.
prediction_04 = None

# %%
with (served("fastapi", engine="torch", log_path=step.out_dir / "logs" / "04-service-torch.log")
      if step.skip_unless(lab.extra_servers, "PyTorch-engine FastAPI service", "extra_servers=False (smoke profile)",
                          "this run's FastAPI service (ONNX Runtime engine) stands in")
      else contextlib.nullcontext(lab.attach("fastapi"))) as service:
    service_conc = concurrency_sweep(step.run, service, concurrencies=tuple(concurrency_levels), opts=opts,
                                     experiment="04-service-concurrency")

# %% [markdown]
# Triton under the same sweep. The comparison the summary draws from it — the highest concurrency against one
# client — is measured first, in alternating windows (concurrency N, 1, 1, N, …) on the same Triton, so the
# machine's drift (the report's drift probe says how much there was in this run) hits both sides alike and
# cancels in their ratio. Those two sides are the sweep's end points; only the levels between them, if the
# profile has any, are measured on their own.

# %%
lo_c, hi_c = min(concurrency_levels), max(concurrency_levels)
conc_ab = ab(step.run, "04-triton-concurrency-ratio",
             Side(f"concurrency {hi_c}", triton, "tensor", concurrency=hi_c),
             Side(f"concurrency {lo_c}", triton, "tensor", concurrency=lo_c), opts=opts)
conc_ratio = conc_ab[-1]
triton_conc = concurrency_sweep(step.run, triton, concurrencies=tuple(concurrency_levels), opts=opts,
                                experiment="04-triton-concurrency", measured=conc_ab)
by_conc = step.table(step.frame(service_conc + triton_conc, *cols), "by_concurrency",
                     "FastAPI service vs Triton under concurrent batch-1 requests")

# %% [markdown]
# Triton's counters again, after the concurrency sweep. The differences are what that sweep made Triton do:
# images inferred, `execute` calls, and how many calls ran at each batch size.

# %%
stats_after = by_hand.ModelCounts.read(lab.triton_http_url, lab.triton_model)
sweep_counts = stats_after.since(stats_before)
histogram = sweep_counts.by_batch
print(f"{stats_after}\nthis sweep: {sweep_counts.inferences} images in {sweep_counts.executions} executions = "
      f"{sweep_counts.avg_batch:.2f} images per execution; executions by batch size: {histogram}")

# %% [markdown]
# The highest concurrency against one client, from the alternating windows above:

# %%
print(step.ratio(conc_ratio))

# %%
tc = step.frame(triton_conc, "concurrency", "throughput_img_s", "latency_p50_ms", "server_stats.avg_batch",
                "server_stats.avg_queue_ms", "server_stats.avg_compute_infer_ms").sort_values("concurrency")
one, top = tc.iloc[0], tc.iloc[-1]
n, t = int(top["concurrency"]), float(one["server_stats.avg_compute_infer_ms"])
rest = float(one["latency_p50_ms"]) - t  # client, HTTP and copies around the compute
b_avg = float(top["server_stats.avg_batch"] or 1)
step.answer(f"At concurrency 1 Triton computed a request in t = {t:.0f} ms and the client saw {one['latency_p50_ms']:.0f} ms. "
            f"At concurrency {n}, queueing without batching predicts about {n} × {t:.0f} {'+' if rest >= 0 else '−'} {abs(rest):.0f} "
            f"= {n * t + rest:.0f} ms; "
            f"the run measured p50 {top['latency_p50_ms']:.0f} ms, of which Triton reports "
            f"{top['server_stats.avg_queue_ms']:.0f} ms queueing and {top['server_stats.avg_compute_infer_ms']:.0f} ms compute per request. "
            f"Triton executed batches of {b_avg:.2f} images on average, so a request waited about ({n}−1)/{b_avg:.2f} ≈ "
            f"{(n - 1) / b_avg:.1f} executions. Throughput: {one['throughput_img_s']:.1f} → {top['throughput_img_s']:.1f} img/s "
            f"in the sweep; in alternating windows, {step.ratio(conc_ratio)}.")

# %% [markdown]
# ## NVIDIA's perf_analyzer on the same point
# servelab's load generator is one way to measure; NVIDIA's `perf_analyzer` is the tool the Chameleon lab
# and Triton's own documentation use. Here it runs against the same running Triton, at the highest
# concurrency, with batch-1 requests of random data: windows of a fixed number of requests (here six per
# client), repeated until the last three agree within a stability percentage: the rule servelab's windows
# borrowed (its default profile asks two windows, to fit the lab's time). perf_analyzer's default is 10 %;
# here it is 15 %, because on a shared 2-core machine windows of three requests per client never agreed within
# 10 % in six tries, and perf_analyzer then reports nothing at all. On this machine the binary comes from the
# `tritonclient` 2.51 wheel (`servelab triton get-perf-analyzer` fetches it into `build/perf_analyzer/`) and
# runs with the CUDA runtime and `libb64` that the nvidia-pytriton wheel carries; on a GPU node, NVIDIA's SDK
# container has it.
#
# **Predict first.** Both tools keep N requests in flight against the same model and config. Should their
# throughput agree within servelab's window spread? Which one might be a little faster, and why?

# %%
from servelab.lab import batching_tables as tables
from servelab.triton import perf_analyzer as pa

pa_binary = pa.find()
pa_csv = step.out_dir / "perf_analyzer.csv"
pa_cmd = pa.command(pa_binary or Path("perf_analyzer"), lab.triton_http_url.split("://")[-1], lab.triton_model,
                    concurrency=hi_c, requests=2 if opts.quick else 6 * hi_c, stability_pct=100 if opts.quick else 15,
                    max_trials=3 if opts.quick else 6, csv=pa_csv)
print("$ " + " ".join(pa_cmd))
pa_result = None
if step.skip_unless(pa_binary, "perf_analyzer", "no binary on this machine",
                    "the command above; `servelab triton get-perf-analyzer` fetches it"):
    with step.attempt("perf_analyzer", "servelab's own measurement only"):
        pa_result = pa.run(pa_cmd, pa_csv)
        print(pa_result.output[pa_result.output.find("Request concurrency"):].strip())

# %%
ours = triton_conc[-1]
if pa_result is not None:
    step.table(tables.tools_side_by_side(pa_result, ours).round(1), "perf_analyzer", f"The same point measured by two tools, concurrency {hi_c}, "
                                               "minutes apart (not alternating windows)")
    inside = ours["throughput_min_img_s"] <= pa_result.throughput_img_s <= ours["throughput_max_img_s"]
    step.answer(f"perf_analyzer measured {pa_result.throughput_img_s:.1f} img/s at p50 {pa_result.latency_p50_ms:.0f} ms; "
                f"servelab's sweep {ours['throughput_img_s']:.1f} img/s (windows {ours['throughput_min_img_s']:.1f}–"
                f"{ours['throughput_max_img_s']:.1f}) at p50 {ours['latency_p50_ms']:.0f} ms: a ratio of "
                f"{pa_result.throughput_img_s / ours['throughput_img_s']:.2f}, "
                + ("inside servelab's window range, so the two tools agree here. "
                   if inside else "outside servelab's window range. ")
                + "Both keep the same number of requests in flight, so the server sees the same queue; what differs is "
                  "the client. perf_analyzer's C++ client costs less CPU per request than Python threads, and on a "
                  "machine where client and server share two cores that CPU is taken from the model. The two were "
                  "measured minutes apart, so the machine's drift is in this ratio too.")

# %% [markdown]
# ## Batching, request by request: Triton's trace
# The statistics count executions; Triton's **trace** shows them. Started with `--trace-config
# triton,file=<path>`, Triton can write, for every request, when it entered the scheduler's queue, when the
# execution that ran it started computing and when that finished. Tracing is switched on and off at runtime
# through the trace API (`POST /v2/models/<model>/trace/setting`, `trace_level` TIMESTAMPS, `trace_rate` 1)
# while a few clients send batch-1 requests, then the file is read back. Requests that one execution ran
# together share their compute start and end to the nanosecond: that is how they are grouped below.
#
# The load for it is the short loop at the heart of any load generator: N threads, each with its own client
# (tritonclient's HTTP client is not thread-safe), each sending its next request as soon as the last one is
# answered. servelab's `closed_loop` is this loop plus measurement windows.
#
# **Predict first.** With the model's own config and N clients, sketch the timeline: will all N requests
# run as one execution, or will they split into groups? How long does a request that arrives while an
# execution is running wait in the queue?

# %%
from servelab.bench.report import plot_batch_histogram
from servelab.triton import trace

show_code(trace.tracing)
show_code(by_hand.traced)
show_code(by_hand.send)
trace_per_client = 1 if opts.quick else 3
spans_on = []
with step.attempt("Triton's trace", "the executed-batch histogram from /stats"):  # a Triton without a trace file
    spans_on = by_hand.traced(lab.triton_http_url, lab.triton_model, pixels, hi_c, trace_per_client)
if spans_on:
    step.show_plot(trace.plot_timeline(spans_on, step.plot_path("trace_timeline_on"),
                                       title=f"{lab.triton_model}, its own config: {hi_c} clients, batch-1 requests"))
    step.show_plot(plot_batch_histogram(triton_conc, step.plot_path("batch_sizes")))  # /stats, the sweep above

# %%
if spans_on:
    on_row = tables.trace_row(spans_on, "its own config")
    step.table(pd.DataFrame([on_row]).round(1), "trace_on", "One traced window: requests, executions, queue waits")
    step.answer(f"{on_row['requests']} requests ran in {on_row['executions']} executions, by batch size "
                f"{on_row['batch_sizes']}; the concurrency sweep's /stats counted {histogram}. A request waited "
                f"{on_row['queue_ms_median']:.0f} ms in the queue (median; at most {on_row['queue_ms_max']:.0f} ms) "
                f"while an execution took {on_row['execution_ms_median']:.0f} ms. "
                + (f"All {on_row['requests']} arrived while the instance was free, within the batcher's queue delay, "
                   "and ran as one batch; with more requests per client they fall out of step. "
                   if on_row["executions"] == 1 else
                   "A request that arrives during an execution waits for the rest of it, and then rides in the next "
                   "one with everyone who arrived meanwhile: that is why the timeline shows groups taking turns "
                   f"rather than one batch of all {hi_c} clients."))

# %% [markdown]
# ## Your edit, loaded into the running Triton by hand
# Triton's repository API loads a model with a config given in the request, no restart (the server runs in
# explicit model-control mode, `--model-control-mode=explicit`). Below, the model's `config.pbtxt` is read as
# text and **you edit the text**: by default the edit deletes the `dynamic_batching` stanza (batching off);
# change `my_edit` to set a queue delay instead. The text is parsed into Triton's own `ModelConfig` (a typo
# fails here, as Triton would refuse it) and sent as JSON with one request, the same as
# `curl -X POST <url>/v2/repository/models/<model>/load -d '{"parameters": {"config": "<json>"}}'`.
# Triton swaps the model in place, and keeps that config until a load with another one; the last cell of
# this section loads the file's own text back the same way. The request carries the server's key
# (`headers=lab.triton_headers`): a load may bring code that Triton runs, so the repository API answers only
# callers that hold the key (docs/SECURITY.md).
#
# **Predict first.** With batching off, what will the same traced load look like: how many executions, and
# what happens to the queue wait?

# %%
import difflib
import re

from servelab.lab.config_text import as_json, as_text

config_path = repository / lab.triton_model / "config.pbtxt"
if repository == Path(lab.triton_repository):  # the running server's own repository
    pbtxt = config_path.read_text()
else:  # a server whose files are elsewhere (the node's): its loaded config, written out as config.pbtxt text
    pbtxt = as_text(client.get_model_config(lab.triton_model))
my_edit = "off"  # "off": delete the dynamic_batching stanza; or a number: max_queue_delay_microseconds
stanza = re.compile(r"(?ms)^dynamic_batching\s*\{.*?^\}\n")  # from its first line to the closing brace
if my_edit == "off":
    my_pbtxt = stanza.sub("", pbtxt)
else:
    my_pbtxt = stanza.sub(f"dynamic_batching {{\n  max_queue_delay_microseconds: {int(my_edit)}\n}}\n", pbtxt)
print("".join(difflib.unified_diff(pbtxt.splitlines(True), my_pbtxt.splitlines(True), "config.pbtxt", "your edit")))
assert my_pbtxt != pbtxt, f"the edit changed nothing: is there a dynamic_batching stanza in {config_path}?"
my_json = as_json(my_pbtxt)  # parsed by Triton's own ModelConfig: a typo fails here
print(f"POST {lab.triton_http_url}/v2/repository/models/{lab.triton_model}/load  (config: {len(my_json)} bytes of JSON)")
client.load_model(lab.triton_model, config=my_json, headers=lab.triton_headers)
print("the running server now says:", client.get_model_config(lab.triton_model).get("dynamic_batching", "no dynamic_batching"))

# %%
try:
    spans_mine = by_hand.traced(lab.triton_http_url, lab.triton_model, pixels, hi_c, trace_per_client) if spans_on else []
finally:
    own_json = as_json(pbtxt)
    client.load_model(lab.triton_model, config=own_json, headers=lab.triton_headers)  # the file's own config back, by the same request
print("restored:", client.get_model_config(lab.triton_model).get("dynamic_batching", "no dynamic_batching"))
if spans_mine:
    step.show_plot(trace.plot_timeline(spans_mine, step.plot_path("trace_timeline_edit"),
                                       title=f"{lab.triton_model}, your edit ({my_edit}): {hi_c} clients"))
    mine_row = tables.trace_row(spans_mine, f"your edit ({my_edit})")
    step.table(pd.DataFrame([on_row, mine_row]).round(1), "trace_edit",
               "The same traced load with the model's own config and with your edit (one short window each: "
               "a picture, not a throughput measurement; the alternating windows below measure that)")
    step.answer(f"With your edit ({my_edit}) the {mine_row['requests']} requests ran in {mine_row['executions']} "
                f"executions ({mine_row['batch_sizes']}) against {on_row['executions']} with the model's own config; "
                f"the median queue wait was {mine_row['queue_ms_median']:.0f} ms against {on_row['queue_ms_median']:.0f} ms, "
                f"an execution {mine_row['execution_ms_median']:.0f} ms against {on_row['execution_ms_median']:.0f} ms. "
                "Without batching every request waits for every request ahead of it, one execution each; with it, "
                f"for the executions ahead of it, each carrying several requests (on {triton_hw}, for about as many "
                f"times the compute, as the batch-size table showed). The whole window took {mine_row['window_ms']:.0f} ms "
                f"against {on_row['window_ms']:.0f} ms ({mine_row['window_ms'] / on_row['window_ms']:.2f}×), one short "
                "window each: the alternating windows below measure the difference properly.")

# %% [markdown]
# ## Baseline: dynamic batching off, measured in alternating windows
# Does batching cause any of that? The same model **without** its `dynamic_batching` stanza is loaded
# through Triton's repository API (no restart), and windows of batching **on** and **off** alternate in one
# sequence (A B B A A B …) at the highest concurrency, so a machine that gets busier or quieter during the
# measurement moves both sides alike; the model is reloaded only when the side changes. The full profile
# gives the FastAPI service the same test, against a second service with `max_batch` 1.
#
# **Predict first.** On this CPU, will turning batching off change throughput by more than the noise? On a
# GPU?

# %%
from servelab.triton.control import config_dict, config_switch, get_config

batched = config_dict(get_config(lab.triton_http_url, lab.triton_model))
unbatched = {key: value for key, value in batched.items() if key != "dynamic_batching"}
print(f"alternating {lab.triton_model} between its own config and the same minus the dynamic_batching stanza")
# use(0) / use(1) load the batched / unbatched config when the side changes; the original comes back after
with config_switch(lab.triton_http_url, lab.triton_model, [batched, unbatched]) as use:
    triton_on, triton_off, triton_ratio = ab(
        step.run, "04-batching", Side("batching on", triton, "tensor", concurrency=hi_c),
        Side("batching off", triton, "tensor", concurrency=hi_c), opts=opts, prepare=use, params={"system": "triton"})
baseline = [("triton", "off (no dynamic_batching)", triton_off, "on", triton_on, triton_ratio)]
if step.skip_unless(lab.extra_servers and lab.service_batching_baseline, "FastAPI service with max_batch 1",
                    "two more torch services for one ratio (the full profile, `service_batching_baseline=True`)",
                    "Triton's baseline only"):
    with served("fastapi", engine="torch", log_path=step.out_dir / "logs" / "04-service-batching.log") as service_on, \
            served("fastapi", engine="torch", max_batch=1,
                   log_path=step.out_dir / "logs" / "04-service-max-batch-1.log") as service_off:
        service_on_rec, service_off_rec, service_ratio = ab(
            step.run, "04-batching", Side("batching on", service_on, "tensor", concurrency=hi_c),
            Side("batching off", service_off, "tensor", concurrency=hi_c), opts=opts, params={"system": "fastapi"})
    baseline.append(("fastapi", "off (max_batch 1)", service_off_rec, "on", service_on_rec, service_ratio))
batching = step.frame([rec for row in baseline for rec in (row[2], row[4])], "concurrency", "throughput_img_s",
                      "throughput_min_img_s", "throughput_max_img_s", "latency_p50_ms", "latency_p99_ms",
                      "server_stats.avg_batch", "stable")
batching.insert(0, "batching", [mode for row in baseline for mode in (row[1], row[3])])
batching.insert(0, "system", [row[0] for row in baseline for _ in (0, 1)])
batching = step.table(batching, "batching_off_on",
                      f"Batching off vs on at concurrency {hi_c} (batch-1 requests, alternating windows)")

# %%
step.answer(" ".join(f"{system}: {step.ratio(ratio)}." for system, *_, ratio in baseline)
            + f" On {triton_hw} a batch of {int(big['batch'])} took as long as "
              f"{big['batch'] / small['batch'] / gain:.1f} batch-{int(small['batch'])} requests (the batch-size table "
              "above; \"Why\" below "
              "computes the most batching can gain here)"
            + ("." if triton.gpus else "; on a GPU the same switch is the largest single gain in the source material "
               "(see below)."))

# %% [markdown]
# ### Exercise: was your prediction right?
# Every measured point is a series of windows; the throughput of each window differs a little from the
# next. A difference smaller than that spread is no difference. Below, `bands` holds, per server, the mean
# throughput at the highest concurrency (`value`) and the lowest and highest window this run measured
# (`lo`, `hi`). Decide from the bands, not from the means alone.

# %% tags=["exercise"]
# Exercise 04.1: read the outcome at the highest concurrency, ties included
def read_outcome(bands):
    """Return "fastapi" or "triton-http" when that server's band lies wholly above the other's, or "tie"
    when the two bands overlap. `bands`: index = server; columns value, lo, hi (images per second)."""
    # BEGIN SOLUTION
    service_band, triton_band = bands.loc["fastapi"], bands.loc["triton-http"]
    if service_band["lo"] <= triton_band["hi"] and triton_band["lo"] <= service_band["hi"]:
        return "tie"
    return "fastapi" if service_band["value"] > triton_band["value"] else "triton-http"
    # END SOLUTION


# %%
from servelab.assignments import checks

loaded = step.frame(service_conc + triton_conc)
loaded = loaded[loaded["concurrency"] == max(concurrency_levels)]
checks.outcome(read_outcome, loaded, key="server", a="fastapi", b="triton-http", prediction=prediction_04,
               exercise="04.1", step=step)

# %%
engine = service_conc[-1]["engine"]
engines = "one engine, ONNX Runtime" if engine == "onnx" else f"two engines ({engine} in the service, ONNX Runtime in Triton)"
step.answer(f"At concurrency {max(concurrency_levels)}, "
            + step.versus(f"the FastAPI service ({engine} engine)", service_conc[-1], "Triton", triton_conc[-1])
            + f". Measured minutes apart, with {engines}: this reads how each stack copes with concurrency. Which "
              "serving layer is faster is 06a's question, measured there with one engine behind both, in "
              "alternating windows.")


# %% [markdown]
# ### Exercise: configure dynamic batching yourself, live
# Triton reads its batching policy from the model's `config.pbtxt`. Write the two stanzas for this model:
# `dynamic_batching` with a queue delay of 2 ms (no `preferred_batch_size`: see "Why" below), and an
# `instance_group` with two instances of the kind this place runs on (`KIND_CPU` here, `KIND_GPU` on the
# GPU node). The check parses your text into Triton's own `ModelConfig`, then **loads it into the running
# server** (repository API, load with a config override), measures it at the highest concurrency between
# two measurements of the model's own config, and puts the original back. It passes when Triton accepts
# and serves your config; whether it beat the default is reported — explain the result in a sentence.

# %%
from servelab.triton.control import get_config

max_batch = int(get_config(lab.triton_http_url, lab.triton_model)["max_batch_size"])
instance_kind = "KIND_GPU" if lab.place == "node" else "KIND_CPU"
print(f"{lab.triton_model}: max_batch_size {max_batch}; instances of kind {instance_kind}")

# %% tags=["exercise"]
# Exercise 04.2: write the dynamic_batching and instance_group stanzas, applied to the running server
def triton_stanzas(max_batch):
    """config.pbtxt text: dynamic batching with a 2 ms queue delay, and two instances of kind
    `instance_kind`. (`max_batch` is the model's max_batch_size, if you want to write it too.)"""
    # BEGIN SOLUTION
    return (f"max_batch_size: {max_batch}\n"
            "dynamic_batching { max_queue_delay_microseconds: 2000 }\n"
            f"instance_group [ {{ kind: {instance_kind} count: 2 }} ]\n")
    # END SOLUTION


# %%
checks.live_config(triton_stanzas, run=step.run, triton_http_url=lab.triton_http_url, model=lab.triton_model,
                   max_batch=max_batch, kind=instance_kind, count=2, max_delay_us=2000,
                   concurrency=max(concurrency_levels), opts=opts, exercise="04.2", step=step)

# %%
from servelab.bench.report import plot_latency_throughput

step.show_plot(plot_latency_throughput(service_conc + triton_conc, step.plot_path("latency_vs_throughput")))

# %% [markdown]
# ## Why: the mechanism, with this run's numbers
# A server that runs one request at a time is a single queue. At concurrency N each client always has one
# request in flight, so a new request finds N−1 ahead of it: latency ≈ N × compute time, throughput = 1 /
# compute time, whatever N is. Dynamic batching changes the *service* time per image only if a batch of B
# costs less than B single runs. That is the whole question, and the hardware answers it:
#
# - **On this CPU** ONNX Runtime spreads one image over every core, so a batch of B costs nearly B times one
#   image (the batch-size table above says how nearly). Collecting requests into batches then saves only
#   the part of the cores a single image left idle: the queue is just as long, it is served in bigger bites.
# - **On a GPU** one image uses a small part of the device; a batch of 16 may cost barely more than a batch
#   of 1. Then serving the N−1 waiting requests in one execution divides their wait by B.
#
# Two settings are often misread:
#
# - `max_queue_delay_microseconds` is how long the batcher may *hold* a request when the queue has fewer
#   than `max_batch_size` requests waiting. Under load, requests are already waiting when the instance
#   frees up; the batcher takes them at once, so the delay does not create those batches (05a measures it).
# - `preferred_batch_size` is not something most models need. Triton's own guidance: leave it unset and let
#   the batcher form the largest batch it can, unless particular sizes run much faster (a TensorRT engine
#   built for them). The source write-ups set `[4, 8, 16, 32]` and `[4, 6, 8, 10]` out of habit.

# %%
bb = step.frame(triton_batches, "batch", "latency_p50_ms").sort_values("batch").set_index("batch")["latency_p50_ms"]
B = int(bb.index.max())
per_image_ratio = (bb[B] / B) / bb[bb.index.min()]
step.answer(f"In this run one batch-{B} request took {bb[B]:.0f} ms against {bb[bb.index.min()]:.0f} ms for batch "
            f"{int(bb.index.min())}: each image of the batch cost {per_image_ratio:.2f} of a single image. "
            f"A batching server can therefore raise throughput by at most about {1 / per_image_ratio:.2f}× here; "
            f"the concurrency sweep reached {top['throughput_img_s'] / one['throughput_img_s']:.2f}× its concurrency-1 "
            "throughput. On the Chameleon lab's P100 the same ratio was about 0.08 (batch 16 in 24 ms vs 19 ms for one "
            "image), which is why batching multiplies GPU throughput.")

# %% [markdown]
# ### Why, on a two-core CPU, PyTorch gains from a batch and ONNX Runtime in Triton hardly does
# On a two-core CPU the two engines react differently to a batch: in default runs of this lab, in-process
# PyTorch gained about 1.5× from batch 1 to batch 8, while ONNX Runtime behind Triton gained a few percent
# from a batch and about 1.07× from dynamic batching (the cell below says what this run measured). A batch can
# only save what a single image wastes, and the two engines waste different amounts at batch 1:
#
# - **PyTorch (eager)** runs the network one operator at a time from Python: each of the few hundred operator
#   calls is dispatched, allocates its output, and splits a small matrix product (50 tokens × 768) over the
#   two threads, which then meet again. That per-call cost is paid once per *call*, whatever the batch, so a
#   batch of B shares it among B images.
# - **ONNX Runtime** runs a graph optimised once when the session is created (fused attention, GELU and
#   layer-norm kernels, memory planned ahead) and its intra-op threads already keep both cores busy on one image.
#   There is little per-call cost left to share, so batch B costs about B single images, and dynamic batching in
#   Triton can only recover that small remainder.
#
# The cell below works out, from this run's table, how much per-image time a batch saved for each engine, and
# how close each engine's batch-1 rate came to its own largest-batch rate.

# %%
lo_b, hi_b = min(batch_sizes), max(batch_sizes)
engines_cmp = tables.batch_gain_by_engine({"PyTorch in-process": torch_batches,
                                           f"ONNX Runtime in Triton ({triton_hw})": triton_batches}, lo_b, hi_b)
engines_cmp = step.table(engines_cmp.round(2), "batch_gain_by_engine",
                         f"What batch {hi_b} saved per image, by engine (p50 per request ÷ batch; one client)")
pt, ox = engines_cmp.iloc[0], engines_cmp.iloc[1]
step.answer(f"PyTorch took {pt[f'ms_per_image_batch_{lo_b}']:.0f} ms per image at batch {lo_b} and "
            f"{pt[f'ms_per_image_batch_{hi_b}']:.0f} ms at batch {hi_b}: {pt['saved_ms_per_image']:.0f} ms per image was "
            f"per-call cost that the batch shared out, a gain of {pt['batch_gain']:.2f}× (in alternating windows: "
            f"{step.ratio(torch_ratio)}). ONNX Runtime in Triton took {ox[f'ms_per_image_batch_{lo_b}']:.0f} and "
            f"{ox[f'ms_per_image_batch_{hi_b}']:.0f} ms, saving {ox['saved_ms_per_image']:.0f} ms per image "
            f"({ox['batch_gain']:.2f}×), and dynamic batching on ÷ off gave {triton_ratio['ratio']:.2f}× under "
            f"concurrent clients. At batch {hi_b} the two engines ran at {pt[f'img_s_batch_{hi_b}']:.1f} and "
            f"{ox[f'img_s_batch_{hi_b}']:.1f} img/s: "
            + ("close to each other, the rate this hardware can do this network's arithmetic; the engines differ at "
               "batch 1, in how much of that rate a single image already reaches. "
               if abs(pt[f"img_s_batch_{hi_b}"] / ox[f"img_s_batch_{hi_b}"] - 1) < 0.25 else
               "not the same rate, so the engines differ in their arithmetic too, not only in per-call cost. ")
            + "Batching pays where a single request leaves capacity unused, per-call overhead on a CPU or idle "
              "multiply units on a GPU; ONNX Runtime on two cores leaves little of either.")


# %% [markdown]
# ## The same switch on an emulated accelerator
# Everything above ran on this CPU, where batch 1 already keeps both cores busy. To see what the same switch
# does in front of a GPU without one, the lab's Triton also serves `openclip_vit_b32_emulated`: a python-backend
# model whose every execution *waits* t(B) on an **emulated device** instead of computing (it answers with a
# stand-in vector, not an embedding). t(B) comes from a **device profile**; `vit-b32-h100` is a roofline
# estimate for ViT-B/32 on an H100, slowed down so that two laptop cores can keep it fed, which leaves every
# ratio below unchanged. Its rows say `emulated <profile>`: they are an emulation, never a GPU measurement.
#
# The profile alone predicts what batching can buy: N requests served as one batch instead of N batches of
# one is t(1)·N ÷ t(N) times more throughput. With dynamic batching on and no queue delay, closed-loop clients
# do not all end up in one batch: the first request finds the instance idle and runs alone, the others queue
# behind it and run as the next batch, and each group resends as soon as it is answered, while the other
# group's batch runs. So N clients split into **two groups that take turns**: a round of N images takes
# t(a) + t(b) (a + b = N) instead of N·t(1), and the average executed batch is about N/2.
#
# **Predict first.** From the profile table below: at the highest concurrency, what will batching on ÷ off be
# on the emulated device, and what average executed batch will Triton report? Then compare with this CPU.

# %%
from servelab.bench.experiments import emulated_lesson as emulated
from servelab.model.device_profile import profile as device_profile_named

emu_profile = device_profile_named(device_profile)
step.table(pd.DataFrame(emulated.profile_table(emu_profile, {1, max(1, hi_c // 2), hi_c})), "emulated_profile",
           f"Device profile {emu_profile.label} (not a measurement): {emu_profile.source}", measured=False)
emu_ready = step.skip_unless(lab.place != "node" and emulated.available(lab.triton_http_url), "the emulated accelerator",
                             "this Triton has no openclip_vit_b32_emulated model (a GPU node's repository has none: it "
                             "has the GPU itself)", "the measurements above")

# %%
if emu_ready:  # batching on vs off at the highest concurrency in alternating windows, then the concurrency sweep
    emu = emulated.compare(step.run, lab.triton_http_url, step.out_dir,
                           emulated.lesson_plan("04", device_profile, concurrency_levels), opts)
    (emu_on, emu_off, emu_ratio), emu_conc = emu.pairs["04-emulated-batching"], emu.sweeps["04-emulated-concurrency"]
    emu_cols = ["params.device", "params.batching", "concurrency", "throughput_img_s", "throughput_min_img_s",
                "throughput_max_img_s", "latency_p50_ms", "server_stats.avg_batch", "stable"]
    step.table(step.frame([emu_off] + emu_conc, *emu_cols).rename(columns={"params.device": "device",
                                                                          "params.batching": "batching"}),
               "emulated_by_concurrency", f"{emu.caption}: batch-1 clients, dynamic batching on (no queue delay) "
                                          f"and off; max_batch_size 32, one instance")

# %%
if emu_ready:
    n = hi_c
    can_buy, groups = emu_profile.batching_gain(n), emulated.alternating_groups_gain(emu_profile, n)
    b_on = float((emu_on.get("server_stats") or {}).get("avg_batch") or 0)
    a_grp = max(1, n // 2)
    round_ms = 1000 * (emu_profile.t_s(a_grp) + emu_profile.t_s(n - a_grp)) if n > 1 else 1000 * emu_profile.t_s(1)
    by_c = {r["concurrency"]: r for r in emu_conc}
    step.answer(
        f"On the emulated device ({emu_profile.label}; an emulation, not a GPU measurement): t(1) = "
        f"{1000 * emu_profile.t_s(1):.0f} ms and t({n}) = {1000 * emu_profile.t_s(n):.0f} ms, so batching could buy "
        f"t(1)·{n} ÷ t({n}) = {can_buy:.2f}×; two groups taking turns predict {groups:.2f}× and an average batch of "
        f"{n / 2:g}. Measured in alternating windows: {step.ratio(emu_ratio)}, with Triton executing "
        f"{b_on:.2f} images per batch. A request waited about ({n}−1)/{max(b_on, 1):.2f} ≈ {(n - 1) / max(b_on, 1):.1f} "
        f"executions: the two-group round predicts a p50 of about {round_ms:.0f} ms, the run measured "
        f"{emu_on['latency_p50_ms']:.0f} ms (HTTP and the CPU's share of each request on top). The average executed "
        "batch by concurrency: " + ", ".join(f"{c} client(s) {float((r.get('server_stats') or {}).get('avg_batch') or 0):.2f}"
                                             for c, r in sorted(by_c.items()))
        + f". On this CPU the same switch gave {triton_ratio['ratio']:.2f}×, where its batch-size table predicts about "
          f"{1 / per_image_ratio:.2f}× (a batch costs about what its images cost). The gap between the two groups and one full batch of {n} is what a queue "
          "delay can close: 05a measures that.")
    side_by_side = pd.DataFrame([
        {"device": f"this CPU ({lab.triton_model})", **tables.ratio_columns(triton_ratio, "on_div_off"),
         "avg_batch_on": (triton_on.get("server_stats") or {}).get("avg_batch"),
         "predicted": round(1 / per_image_ratio, 2), "predicted_from": "the batch-size table above (measured)"},
        {"device": f"{emu_profile.label} (emulation)", **tables.ratio_columns(emu_ratio, "on_div_off"),
         "avg_batch_on": b_on, "predicted": round(groups, 2), "predicted_from": "the profile: two groups taking turns"}])
    step.table(side_by_side.round(2), "batching_cpu_vs_emulated",
               f"Dynamic batching on ÷ off at concurrency {hi_c}, alternating windows: this CPU and the emulated "
               "accelerator (an emulation, not a GPU measurement)")

# %% [markdown]
# ## Compared with the source material
# See `SOURCES.md` for the write-ups and their hardware.
#
# - **Chameleon lab "System optimizations for serving"** (2× NVIDIA P100, a Food-11 classifier in Triton's
#   python backend): one client, 51.5 inferences/s at 18.6 ms compute; 8 clients, still 52.4/s but 132 ms of
#   151 ms spent queueing — about seven compute times, the (N−1) rule; dynamic batching at 8 clients raised
#   it to 78.6/s, with 1,436 inferences in 386 executions (3.7 per batch). One client sending batches of 16
#   got 657/s: the GPU had room the single requests never used.
# - **Photo-dedup "Triton step" and "ONNX Runtime / Triton optimisation report"** (RTX A4000, OpenCLIP
#   ViT-B/32 like ours): after the switch from JSON to binary tensors, concurrent throughput was 36.8 req/s
#   for PyTorch/FastAPI and 35.8 req/s for Triton — a tie, as a single queue in front of the same GPU
#   predicts; its first, JSON-encoded Triton numbers (564 ms single-image p50) measured the encoder, not Triton.
#
# This repository's own GPU reference (one H100, 2026-11-26) is in `reference/nvidia-h100-80gb-hbm3/`; its figure for
# this question is printed under the headline. It did not measure Triton on the GPU, so the Triton figures here
# are the write-ups', not ours.

# %%
t = by_conc[by_conc["server"].str.startswith("triton")].sort_values("concurrency")
lo, hi = t.iloc[0], t.iloc[-1]
step.shows(
    f"Triton throughput, measured in alternating windows: {step.ratio(conc_ratio)}"
    + f"; executing batches of {hi['server_stats.avg_batch']:.1f} images on average at concurrency {hi['concurrency']} "
    f"(p50 {lo['latency_p50_ms']:.0f} → {hi['latency_p50_ms']:.0f} ms). "
    f"Dynamic batching on ÷ off at concurrency {hi_c}, in alternating windows: "
    + "; ".join(f"{system}: {step.ratio(ratio)}" for system, *_, ratio in baseline)
    + f". In-process PyTorch, measured in alternating windows: {step.ratio(torch_ratio)}."
)
