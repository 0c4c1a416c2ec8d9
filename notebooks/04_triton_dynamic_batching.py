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
# Stuck? [When something goes wrong](../docs/TROUBLESHOOTING.md); how a figure is read:
# [How this lab reads a measurement](../docs/METHOD.md).
#
# **After this notebook you can**
# - read a Triton model repository (`config.pbtxt`, a python-backend `model.py`) and call it with `tritonclient`;
# - read Triton's statistics and its request trace to see the batches it ran;
# - edit a model's `config.pbtxt` on disk and load it with one repository-API request;
# - write NVIDIA's `perf_analyzer` command lines for a concurrency sweep, batching on and off;
# - predict a request's wait at concurrency N from one compute time, and what batching can buy from what a
#   batch of B costs against B single images, then check both here and on an emulated accelerator.
#
# Clients send one photo at a time; **dynamic batching** lets the server run several waiting requests as one
# batch. The same ViT-B/32 is measured in this process (PyTorch), behind servelab's FastAPI service and behind
# Triton: by batch size, then under concurrent clients. Locally Triton runs the *python* backend (`model.py`,
# calling ONNX Runtime); a GPU node runs Triton's onnxruntime backend.
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
from pathlib import Path

import pandas as pd

from servelab.assignments import checks
from servelab.bench.experiments import Side, ab, batch_sweep, concurrency_sweep
from servelab.bench.experiments import emulated_lesson as emulated
from servelab.bench.report import Grade, plot_batch_histogram, plot_latency_throughput, ratio_reading, words
from servelab.bench.servers import served
from servelab.lab import batching_tables as tables
from servelab.lab.places import in_process_note, in_process_provider
from servelab.lab.step import show_code
from servelab.model.device_profile import profile as device_profile_named
from servelab.triton import perf_analyzer as pa
from servelab.triton import trace
from servelab.triton.control import config_dict, config_switch, get_config
from servelab.triton.repository import STAGING

step, opts = lab.step, lab.load
triton = lab.attach("triton-http")
# where Triton computes, as the server itself reports it (its loaded config names the GPUs it runs on)
triton_hw = "the server's GPU" if triton.gpus else ("this CPU" if lab.place != "node" else "the server's CPU")
cols = ["server", "engine", "batch", "concurrency", "throughput_img_s", "throughput_min_img_s", "throughput_max_img_s",
        "latency_p50_ms", "latency_p99_ms", "server_stats.avg_batch", "stable"]

# %% [markdown]
# ## The code Triton runs
# Triton serves what its **model repository** (staged from `servelab/triton/staging/cpu`) says: first the
# encoder's `config.pbtxt`, its queue unbounded on purpose
# ([half-second stalls with a bounded queue](../docs/TROUBLESHOOTING.md#half-second-stalls-with-a-bounded-triton-queue)).
# Then `execute`: Triton hands it a *list* of requests, longer than one when the batcher collected several, and
# it runs them as one `session.run` on a bigger array. That is all batching buys.

# %%
repository = Path(lab.triton_repository)
if not (repository / lab.triton_model).is_dir():  # not this machine's Triton (e.g. the node's): read its template
    repository = next(STAGING / f for f in ("gpu", "cpu") if (STAGING / f / lab.triton_model).is_dir())
show_code(repository / lab.triton_model / "config.pbtxt", lang="protobuf")
model_py = repository / lab.triton_model / "1" / "model.py"
if model_py.is_file():
    show_code(model_py, "def execute", "def finalize")
else:
    print(f"{lab.triton_model} has no model.py: it runs on Triton's onnxruntime backend, which batches the same way in C++")

# %% [markdown]
# ## One request by hand: `tritonclient`, binary vs JSON
# With `binary_data=True` an `InferInput`'s floats travel as raw bytes after a JSON header, with `False` as
# decimal text.
#
# **Predict first.** One preprocessed photo is 3×224×224 float32 values. How many times larger is the JSON
# body than the binary one, and will the served round trip differ by more than the run-to-run noise?

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
b, j = raw_calls.set_index("encoding").loc["binary"], raw_calls.set_index("encoding").loc["json"]
overlap = j["round_trip_ms_min"] <= b["round_trip_ms_max"]
step.answer(f"The JSON body was {j['request_bytes'] / 1024:,.0f} KiB against {b['request_bytes'] / 1024:,.0f} KiB binary "
            f"({j['request_bytes'] / b['request_bytes']:.1f}× larger; the photo-dedup write-up measured 2,980 vs 588 KB). "
            f"The round trip took {j['round_trip_ms_median']:.0f} ms with JSON vs {b['round_trip_ms_median']:.0f} ms binary "
            "(median of 5): " + (f"the ranges overlap, so the JSON cost hides in the noise of the compute on {triton_hw}."
                                 if overlap else "the ranges do not overlap: encoding, sending and parsing text cost "
                                 f"{j['round_trip_ms_median'] - b['round_trip_ms_median']:.0f} ms more per image."))

# %% [markdown]
# ## By batch size: PyTorch in-process vs Triton, one client
#
# **Predict first.** With one client sending batches of N images, will images per second grow about N times
# (parallelism one image leaves idle), stay flat (one image already keeps the hardware busy), or land in between?
# How will one request's latency grow?

# %%
torch_provider = in_process_provider(lab.place, "torch")  # at place=node: the node's GPU when this kernel has it
with served("in-process", engine="torch", provider=torch_provider) as torch_engine:
    # the largest batch against the smallest in alternating windows; its two sides are also the sweep's end points
    lo_b, hi_b = min(batch_sizes), max(batch_sizes)
    torch_ab = ab(step.run, "04-torch-batch-ratio", Side(f"batch {hi_b}", torch_engine, "tensor", batch=hi_b),
                  Side(f"batch {lo_b}", torch_engine, "tensor", batch=lo_b), opts=opts)
    torch_ratio = torch_ab[-1]
    torch_batches = batch_sweep(step.run, torch_engine, batches=tuple(batch_sizes), opts=opts,
                                experiment="04-torch-batch", measured=torch_ab)
in_process_note(step, lab.place, torch_provider, "the in-process PyTorch rows (by batch size)")
# Triton the same way: the two sides of its alternating windows are the sweep's end points
triton_batch_ab = ab(step.run, "04-triton-batch", Side(f"batch {hi_b}", triton, "tensor", batch=hi_b),
                     Side(f"batch {lo_b}", triton, "tensor", batch=lo_b), opts=opts)
triton_batch_ratio = triton_batch_ab[-1]
triton_batches = batch_sweep(step.run, triton, batches=tuple(batch_sizes), opts=opts, experiment="04-triton-batch",
                             measured=triton_batch_ab)
by_batch = step.table(step.frame(torch_batches + triton_batches, *cols), "by_batch",
                      "PyTorch (in-process) vs Triton by batch size, concurrency 1")
tb = step.frame(triton_batches, "batch", "throughput_img_s", "latency_p50_ms").sort_values("batch")
small, big = tb.iloc[0], tb.iloc[-1]
gain = big["throughput_img_s"] / small["throughput_img_s"]
graded = tables.batch_gain_grade(triton_batch_ratio, target=hi_b / lo_b, margin=step.margin(interleaved=True))
step.answer(f"Triton went from {small['throughput_img_s']:.1f} img/s at batch {lo_b} to {big['throughput_img_s']:.1f} "
            f"img/s at batch {hi_b}: {step.ratio(triton_batch_ratio)} ({words(graded, target=hi_b / lo_b)}); one "
            f"request's p50 went from {small['latency_p50_ms']:.0f} to {big['latency_p50_ms']:.0f} ms. "
            + tables.batch_gain_cause(triton_batch_ratio, target=hi_b / lo_b, margin=step.margin(interleaved=True)))

# %% [markdown]
# ## Under concurrency: batch-1 requests from N clients
# The FastAPI service (its micro-batcher from notebook 01) against Triton (its dynamic batcher). Triton counts
# **inferences** (images) and **executions** (calls to `execute`); their ratio is the average executed batch.
# Exercise 04.3 reads them before and after the sweep (`GET …/v2/models/<model>/versions/1/stats`).
#
# **Predict first.** Call *t* Triton's compute time at concurrency 1. Without batching a request at concurrency
# N finds N−1 ahead of it: latency ≈ N·t, throughput flat. With batches of B, N/B − 1 executions stand ahead,
# each lasting what a batch of B cost above. Will latency be near N·t, and what average batch will Triton report?

# %%
# Exercise 04.1 asks you to read this measurement. Write your prediction down first: at the highest
# concurrency, which server delivers more images per second — "fastapi", "triton-http", or "tie" (the two
# within the spread the run measures)? Then run the cells below.
prediction_04 = None

# %%
stats_before = by_hand.ModelCounts.read(lab.triton_http_url, lab.triton_model)  # servelab's own reading, for the sentences
with (served("fastapi", engine="torch", log_path=step.out_dir / "logs" / "04-service-torch.log")
      if step.skip_unless(lab.extra_servers, "PyTorch-engine FastAPI service", "extra_servers=False (smoke profile)",
                          "this run's FastAPI service (ONNX Runtime engine) stands in")
      else contextlib.nullcontext(lab.attach("fastapi"))) as service:
    service_conc = concurrency_sweep(step.run, service, concurrencies=tuple(concurrency_levels), opts=opts,
                                     experiment="04-service-concurrency")
lo_c, hi_c, swept = min(concurrency_levels), max(concurrency_levels), {}
def triton_sweep():  # Triton: its highest concurrency against one client in alternating windows (docs/METHOD.md), then the rest
    pair = ab(step.run, "04-triton-concurrency-ratio", Side(f"concurrency {hi_c}", triton, "tensor", concurrency=hi_c),
              Side(f"concurrency {lo_c}", triton, "tensor", concurrency=lo_c), opts=opts)
    swept.update(ab=pair, sweep=concurrency_sweep(step.run, triton, concurrencies=tuple(concurrency_levels), opts=opts,
                                                  experiment="04-triton-concurrency", measured=pair))

# %% tags=["exercise"]
# Exercise 04.3: Triton's statistics, read by you (httpx, or tritonclient's get_inference_statistics)
def executed_batch(http_url, model, sweep):
    """GET <http_url>/v2/models/<model>/versions/1/stats (its model_stats[0] has inference_count and
    execution_count), call sweep() once, read again: return the sweep's inferences per execution."""
    # BEGIN SOLUTION
    import httpx

    url = f"{http_url}/v2/models/{model}/versions/1/stats"
    before = httpx.get(url).json()["model_stats"][0]
    sweep()
    after = httpx.get(url).json()["model_stats"][0]
    return (after["inference_count"] - before["inference_count"]) / max(after["execution_count"] - before["execution_count"], 1)
    # END SOLUTION

# %%
checks.stats_avg_batch(executed_batch, http_url=lab.triton_http_url, model=lab.triton_model, sweep=triton_sweep,
                       exercise="04.3", step=step)  # runs the sweep itself when your function did not

# %%
conc_ab, triton_conc, conc_ratio = swept["ab"], swept["sweep"], swept["ab"][-1]
by_conc = step.table(step.frame(service_conc + triton_conc, *cols), "by_concurrency",
                     "FastAPI service vs Triton under concurrent batch-1 requests")
histogram = by_hand.ModelCounts.read(lab.triton_http_url, lab.triton_model).since(stats_before).by_batch
print(f"the sweep's executions by batch size: {histogram}")
tc = step.frame(triton_conc, "concurrency", "throughput_img_s", "latency_p50_ms", "latency_mean_ms", "server_stats.avg_batch",
                "server_stats.avg_queue_ms", "server_stats.avg_compute_infer_ms").sort_values("concurrency")
one, top = tc.iloc[0], tc.iloc[-1]
n, t = int(top["concurrency"]), float(one["server_stats.avg_compute_infer_ms"])
rest = float(one["latency_mean_ms"]) - t  # client, HTTP and copies around the compute (Triton's figures are means)
wait = tables.QueueWait.of(max(triton_conc, key=lambda r: r["concurrency"]))  # Triton's own means at the top
step.answer(f"At concurrency 1 Triton computed a request in t = {t:.0f} ms (mean); the client's mean latency was "
            f"{one['latency_mean_ms']:.0f} ms. At concurrency {n} a queue without batching predicts {n} × {t:.0f} "
            f"{'+' if rest >= 0 else '−'} {abs(rest):.0f} = {n * float(f'{t:.0f}') + float(f'{rest:.0f}'):.0f} ms; the run measured a mean of "
            f"{top['latency_mean_ms']:.0f} ms (p50 {top['latency_p50_ms']:.0f} ms): {wait.queue_ms:.0f} ms queueing and "
            f"{wait.compute_ms:.0f} ms compute, in batches of {wait.avg_batch:.2f} images. {wait.sentence()}. "
            f"Throughput, alternating windows: {step.ratio(conc_ratio)}.")

# %% [markdown]
# ## Batching, request by request: Triton's trace
# Switched on at runtime, Triton's **trace** records when each request entered the queue and when its execution
# ran; requests of one execution share its start and end. N threads each resend as soon as they are answered.
#
# **Predict first.** With N clients, will all N requests run as one execution, or split into groups? How long
# does a request that arrives during an execution wait?

# %%
for shown in (trace.tracing, by_hand.traced, by_hand.send):
    show_code(shown)
trace_per_client = 1 if opts.quick else 3
spans_on = []
with step.attempt("Triton's trace", "the executed-batch histogram from /stats"):  # a Triton without a trace file
    spans_on = by_hand.traced(lab.triton_http_url, lab.triton_model, pixels, hi_c, trace_per_client)
if spans_on:
    step.show_plot(trace.plot_timeline(spans_on, step.plot_path("trace_timeline_on"),
                                       title=f"{lab.triton_model}, its own config: {hi_c} clients, batch-1 requests"))
    step.show_plot(plot_batch_histogram(triton_conc, step.plot_path("batch_sizes")))  # /stats, the sweep above
    on_row = tables.trace_row(spans_on, "its own config")
    step.table(pd.DataFrame([on_row]).round(1), "trace_on", "One traced window: requests, executions, queue waits")
    step.answer(by_hand.trace_alone(on_row, histogram, hi_c))

# %% [markdown]
# ## Your copy of the encoder: edited on disk, loaded by you
# The next cell copies the encoder's folder to `<model>_mine` in the server's repository. **You edit its
# `config.pbtxt`** (in code, or in Jupyter's editor: then set `edit_config = None`) and send the load request:
# Triton loads a new folder only when asked, and only with the server's key (`headers=lab.triton_headers`,
# docs/SECURITY.md).
#
# **Predict first.** With batching off, how many executions will the same traced load take, and how long a wait?

# %%
mine, mine_dir = f"{lab.triton_model}_mine", Path(lab.triton_repository) / f"{lab.triton_model}_mine"
# a server whose files are elsewhere (place=node): copy and edit its folder there, then send the load against it
not_here = None if repository == Path(lab.triton_repository) else f"{lab.triton_model}'s folder is not on this machine"
if not not_here:
    show_code(by_hand.copy_model)
    print("copied:", sorted(p.name for p in by_hand.copy_model(repository, lab.triton_model, mine).rglob("*")))

# %% tags=["exercise"]
# Exercise 04.4: turn dynamic batching off in your copy's config.pbtxt, on disk
def edit_config(path):
    """Rewrite the file at `path` without its dynamic_batching stanza (nothing else changed)."""
    # BEGIN SOLUTION
    text = path.read_text()
    start = text.index("\ndynamic_batching") + 1  # the stanza, from its first line to its closing brace
    path.write_text(text[:start] + text[text.index("\n}", start) + 3:])
    # END SOLUTION

# %%
checks.config_on_disk(edit_config, path=mine_dir / "config.pbtxt", original=repository / lab.triton_model / "config.pbtxt",
                      model=mine, not_here=not_here, exercise="04.4", step=step)

# %% tags=["exercise"]
# Exercise 04.5: the load request, sent by you with tritonclient (or the curl line, then set load_mine = None)
def load_mine(address, model):
    """POST /v2/repository/models/<model>/load, with the server's key, no config of yours (Triton reads the file)."""
    # BEGIN SOLUTION
    httpclient.InferenceServerClient(address).load_model(model, headers=lab.triton_headers)
    # END SOLUTION

# %%
(loaded_mine := checks.loaded_from_disk(load_mine, http_url=lab.triton_http_url, model=mine, path=mine_dir / "config.pbtxt",
                                       not_here=not_here, exercise="04.5", step=step))

# %%
spans_mine = (by_hand.traced(lab.triton_http_url, mine, pixels, hi_c, trace_per_client)  # the same load, your copy
              if spans_on and loaded_mine.passed else [])
if spans_mine:
    step.show_plot(trace.plot_timeline(spans_mine, step.plot_path("trace_timeline_edit"),
                                       title=f"{mine}, no dynamic_batching: {hi_c} clients"))
    mine_row = tables.trace_row(spans_mine, f"{mine} (no dynamic_batching)")
    step.table(pd.DataFrame([on_row, mine_row]).round(1), "trace_edit", "The same traced load, the encoder and "
               "your copy (one short window each: a picture, not a throughput measurement)")
    step.answer(by_hand.trace_versus(on_row, mine_row))

# %% [markdown]
# ## NVIDIA's perf_analyzer: batching on and off, by concurrency
# **You write two command lines**, the encoder (on) and your copy (off): batch-1 requests over
# `--concurrency-range lo:hi:step` in windows of N requests (`--measurement-mode count_windows
# --measurement-request-count N`), otherwise alike. The check runs them ([when it reports
# nothing](../docs/TROUBLESHOOTING.md#perf_analyzer-reports-nothing)).
#
# **Predict first.** At which concurrency will batching on pull ahead of off, if at all, on this hardware?

# %%
pa_binary, pa_range, pa_requests = pa.find(), (lo_c, hi_c, max(1, hi_c - lo_c)), 2 * hi_c if opts.quick else 8 * hi_c
print(f"perf_analyzer: {pa_binary}; HTTP at {lab.triton_address}; concurrency {pa_range}, windows of {pa_requests}")

# %% tags=["exercise"]
# Exercise 04.6: two perf_analyzer lines, batching on (the encoder) and off (your copy)
def sweep_lines(binary, models, address, concurrency_range, requests):
    """{"on": line, "off": line}: shell lines running `binary` against models["on"] / models["off"] at
    `address`, over the concurrency range (lo, hi, step), in windows of `requests` requests."""
    # BEGIN SOLUTION
    lo, hi, by = concurrency_range
    point = (f"--concurrency-range {lo}:{hi}:{by} --measurement-mode count_windows --measurement-request-count "
             f"{requests} -s 15 --max-trials 4 -u {address} -i http -b 1")
    return {key: f"{binary} -m {model} {point}" for key, model in models.items()}
    # END SOLUTION

# %%
(swept_pa := checks.perf_analyzer_sweep(sweep_lines, binary=pa_binary, models={"on": lab.triton_model, "off": mine},
                                        address=lab.triton_address, concurrency_range=pa_range, requests=pa_requests,
                                        out_dir=step.out_dir, exercise="04.6", step=step)
 if step.skip_unless(pa_binary and loaded_mine.passed, "perf_analyzer", "no binary here, or no loaded copy of yours",
                     "`servelab triton get-perf-analyzer` fetches the binary") else None)

# %%
if swept_pa is not None and swept_pa.passed:
    pa_table = by_hand.on_off_table(swept_pa.detail["rows"])
    step.table(pa_table.round(2).reset_index(), "perf_analyzer",
               "perf_analyzer, img/s and p50 by concurrency: batching on (the encoder) and off (your copy)")
    step.answer(by_hand.on_off_answer(swept_pa.detail["rows"], triton_conc[-1]))

# %% [markdown]
# ## Baseline: dynamic batching off
# Batching **on** and **off** (the model reloaded without its stanza) alternate at the highest concurrency; the
# full profile also sets the FastAPI service against one with `max_batch` 1.
#
# **Predict first.** From the batch-size table: will turning batching off change Triton's throughput by more
# than the noise on this hardware? On a GPU?

# %%
batched = config_dict(get_config(lab.triton_http_url, lab.triton_model))
unbatched = {key: value for key, value in batched.items() if key != "dynamic_batching"}
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
batching = step.frame([rec for row in baseline for rec in (row[2], row[4])], *cols[3:])
batching.insert(0, "batching", [mode for row in baseline for mode in (row[1], row[3])])
batching.insert(0, "system", [row[0] for row in baseline for _ in (0, 1)])
step.table(batching, "batching_off_on", f"Batching off vs on at concurrency {hi_c} (batch-1 requests, alternating windows)")
step.answer(" ".join(f"{system}: {step.ratio(ratio)}." for system, *_, ratio in baseline)
            + f" On {triton_hw} a batch of {int(big['batch'])} took as long as {big['batch'] / small['batch'] / gain:.1f} "
              f"batch-{int(small['batch'])} requests (\"Why\" below computes what batching can gain from that).")

# %% [markdown]
# ### Exercise: was your prediction right?
# A lead is ranked only when the bands are apart, both settled, and past the run's margin; else a tie. `bands`:
# per server, the mean throughput at the highest concurrency (`value`), its window range (`lo`, `hi`), `settled`.

# %% tags=["exercise"]
# Exercise 04.1: read the outcome at the highest concurrency, ties included
def read_outcome(bands):
    """Return "fastapi" or "triton-http" when the run ranks that server ahead: bands apart, neither `settled`
    False, better ÷ worse − 1 of the values above `margin`. Otherwise "tie", also when only one measured a
    spread (`source` is checks.NO_SPREAD: one window). `bands`: index = server."""
    # BEGIN SOLUTION
    f, t = bands.loc["fastapi"], bands.loc["triton-http"]
    if (f["source"] == checks.NO_SPREAD) != (t["source"] == checks.NO_SPREAD) or False in (f["settled"], t["settled"]):
        return "tie"
    if f.lo <= t.hi and t.lo <= f.hi or max(f.value, t.value) / min(f.value, t.value) - 1 <= f.margin:
        return "tie"
    return "fastapi" if f["value"] > t["value"] else "triton-http"
    # END SOLUTION

# %%
loaded = step.frame(service_conc + triton_conc).query("concurrency == @hi_c")
checks.outcome(read_outcome, loaded, key="server", a="fastapi", b="triton-http", prediction=prediction_04,
               exercise="04.1", step=step)

# %%
engine = service_conc[-1]["engine"]
engines = "one engine, ONNX Runtime" if engine == "onnx" else f"two engines ({engine} in the service, ONNX Runtime in Triton)"
step.answer(f"At concurrency {max(concurrency_levels)}, "
            + step.versus(f"the FastAPI service ({engine} engine)", service_conc[-1], "Triton", triton_conc[-1])
            + f". Measured minutes apart, with {engines}; which serving layer is faster is 06a's question, with one "
              "engine behind both, in alternating windows.")
step.show_plot(plot_latency_throughput(service_conc + triton_conc, step.plot_path("latency_vs_throughput")))

# %% [markdown]
# ### Exercise: configure dynamic batching yourself, live
# Write `dynamic_batching` with a queue delay of 2 ms (no `preferred_batch_size`, see "Why") and an
# `instance_group` of two instances (`KIND_CPU` here, `KIND_GPU` on the node). The check **loads it into the
# running server**, measures it between two runs of the original and passes when Triton serves your config. Say
# whether it beat the default, and why.

# %%
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

# %% [markdown]
# ## Why: what a batch costs decides what batching buys
# Batching shortens the *time per image* only if a batch of B costs less than B single runs; it saves only what
# one image wastes: **per-call cost** and **idle parallel units** (cores or GPU multiply units one image leaves
# unused). `max_queue_delay_microseconds` only *holds* a request while fewer than `max_batch_size` wait (05a
# measures it); `preferred_batch_size` is best left unset unless particular sizes run much faster (a TensorRT
# engine built for them).

# %%
by_engine = tables.batch_gain_by_engine({"PyTorch in-process": torch_batches,
                                         f"ONNX Runtime in Triton ({triton_hw})": triton_batches}, lo_b, hi_b)
step.table(by_engine.round(2), "batch_gain_by_engine", f"What batch {hi_b} saved per image, by engine (one client)")
pt, ox = by_engine.iloc[0], by_engine.iloc[1]
per_image_ratio = ox[f"ms_per_image_batch_{hi_b}"] / ox[f"ms_per_image_batch_{lo_b}"]  # ONNX Runtime in Triton
switch = ratio_reading(triton_ratio)  # batching on ÷ off, read as the sentence above reads it
step.answer(
    f"PyTorch: {step.ratio(torch_ratio)}; the batch saved it {pt['saved_ms_per_image']:.0f} ms per image. ONNX Runtime "
    f"in Triton: {ox['batch_gain']:.2f}× ({words(graded, target=hi_b / lo_b)}), {ox['saved_ms_per_image']:.0f} ms per "
    f"image. An image of a batch-{hi_b} request cost {per_image_ratio:.2f} of a single one, so batching could buy at "
    f"most about {1 / per_image_ratio:.2f}×; at concurrency {hi_c}, {step.ratio(triton_ratio)}. "
    + (f"On {triton_hw} the pairs did not show a batch costing less than its images: little for the batcher to "
       "fill. " if graded in (Grade.FLAT, Grade.LOSS) else f"On {triton_hw} a batch cost less than its images, " + (
           "and the batcher turned part of that into throughput. " if switch.ranked and switch.ahead == "a" else
           "yet batching on measured slower than off. " if switch.ranked else
           "yet this run cannot rank the switch either way. "))
    + f"At batch {hi_b} the engines ran at {pt[f'img_s_batch_{hi_b}']:.1f} and {ox[f'img_s_batch_{hi_b}']:.1f} img/s. "
    + "On the Chameleon lab's P100 an image in a batch of 16 cost about 0.08 of a single run (24 ms vs 19 ms).")

# %% [markdown]
# ## The same switch on an emulated accelerator
# The lab's Triton also serves `openclip_vit_b32_emulated`, whose every execution *waits* t(B) on an **emulated
# device**. t(B) comes from a **device profile**: `vit-b32-h100` is fitted to the H100 run's batches
# (`reference/nvidia-h100-80gb-hbm3`); rows say `emulated <profile>`, never a GPU. One batch of N instead of N of
# one buys t(1)·N ÷ t(N). With no queue delay, closed-loop clients split into **two groups that take turns**: a
# round takes t(a) + t(b) (a + b = N), and the average executed batch is about N/2.
#
# **Predict first.** From the profile table: at the highest concurrency, what will batching on ÷ off be on the
# emulated device, and what average batch will Triton report?

# %%
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
    emu_cols = ["params.device", "params.batching", *cols[3:8], *cols[-2:]]
    step.table(step.frame([emu_off] + emu_conc, *emu_cols).rename(columns={"params.device": "device",
                                                                          "params.batching": "batching"}),
               "emulated_by_concurrency", f"{emu.caption}: batch-1 clients, dynamic batching on (no queue delay) "
                                          f"and off; max_batch_size 32, one instance")
    n = hi_c
    ms = {b: 1000 * emu_profile.t_s(b) for b in {1, max(1, n // 2), n - n // 2, n}}  # t(B) in ms
    can_buy, groups = emu_profile.batching_gain(n), emulated.alternating_groups_gain(emu_profile, n)
    b_on = float((emu_on.get("server_stats") or {}).get("avg_batch") or 0)
    round_ms = ms[max(1, n // 2)] + ms[n - n // 2] if n > 1 else ms[1]  # two groups taking turns
    step.answer(
        f"On the emulated device ({emu_profile.label}; an emulation, not a GPU measurement): t(1) = {ms[1]:.0f} ms and "
        f"t({n}) = {ms[n]:.0f} ms, so batching could buy {can_buy:.2f}×; two groups taking turns predict {groups:.2f}× "
        f"and an average batch of {n / 2:g}. Measured: {step.ratio(emu_ratio)}, {b_on:.2f} images per execution; the "
        f"two-group round predicts a p50 of about {round_ms:.0f} ms, the run measured {emu_on['latency_p50_ms']:.0f} ms "
        f"(HTTP and the CPU's share on top). On {triton_hw} the same switch gave {triton_ratio['ratio']:.2f}× of the "
        f"{1 / per_image_ratio:.2f}× its batch-size table allows. The gap between two groups and one full batch of {n} "
        "is what a queue delay can close: 05a measures that.")
    side_by_side = pd.DataFrame([tables.switch_row(f"this CPU ({lab.triton_model})", triton_ratio, triton_on,
                                                   1 / per_image_ratio, "the batch-size table above (measured)"),
                                 tables.switch_row(f"{emu_profile.label} (emulation)", emu_ratio, emu_on, groups,
                                                   "the profile: two groups taking turns")])
    step.table(side_by_side.round(2), "batching_cpu_vs_emulated",
               f"Dynamic batching on ÷ off at concurrency {hi_c}, alternating windows: this CPU and the emulated "
               "accelerator (an emulation, not a GPU measurement)")

# %% [markdown]
# ## Compared with the source material
# See `SOURCES.md` for the write-ups and their hardware.
#
# - **Chameleon lab** (2× P100, python backend): one client, 51.5 inferences/s; 8 clients, 52.4/s with 132 of
#   151 ms queueing (the N−1 rule); dynamic batching at 8 clients, 78.6/s in batches of 3.7.
# - **Photo-dedup "optimisation report"** (RTX A4000): 36.8 req/s for PyTorch/FastAPI and 35.8 for Triton, a tie.
#
# The H100 reference (`reference/nvidia-h100-80gb-hbm3/`, no Triton) is printed under the headline.

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

# %%
if loaded_mine.passed:  # each python-backend copy holds an ONNX Runtime session: give its memory back
    client.unload_model(mine, headers=lab.triton_headers)
