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
# Stuck? [When something goes wrong](../docs/TROUBLESHOOTING.md); how a figure is read:
# [How this lab reads a measurement](../docs/METHOD.md).
#
# **After this notebook you can**
# - put three serving systems side by side fairly: same model, same engine, same requests, same machine;
# - read a Triton **ensemble** (JPEG bytes → preprocessing model → encoder), say where each step runs, and
#   send it a JPEG by hand;
# - split a request's latency into client-side, queueing, compute and "everything else" from Triton's own
#   statistics, and tell which part a faster model, a faster server or a faster network would shrink;
# - refuse to rank two systems whose measured ranges overlap.
#
# What these servers do past capacity, and how an operator watches them, is notebook 06c.
#
# Three ways to put the same ONNX Runtime engine behind HTTP, sent the same requests (one JPEG per request,
# decoded by the server: servelab's multipart upload, LitServe's base64 JSON, Triton's JPEG ensemble):
#
# - **servelab's FastAPI service** with its own micro-batcher;
# - **LitServe**, the batching Python server people reach for instead (peer baseline);
# - **Triton Inference Server** with dynamic batching.
#
# ```mermaid
# flowchart LR
#   C[N clients<br/>one JPEG per request] --> F & L & T
#   subgraph F[FastAPI service]
#     F1[multipart upload] --> F2[decode + resize<br/>thread pool] --> F3[(micro-batcher)] --> F4[ONNX Runtime]
#   end
#   subgraph L[LitServe]
#     L1[base64 JSON] --> L2[decode_request] --> L3[(batch)] --> L4[ONNX Runtime]
#   end
#   subgraph T[Triton ensemble openclip_vit_b32_jpeg]
#     T1[BYTES input IMAGE] --> T2[preprocess_jpeg<br/>python backend] --> T3[(dynamic batcher)] --> T4[encoder model.py<br/>ONNX Runtime]
#   end
# ```
#
# **Honest framing.** All three run the same ONNX Runtime graph on the same cores; they differ in how they
# use the cores ("Why" below) and in what surrounds the compute: decoding, copies, Python-to-C++ hops, how well
# batching lines requests up. Locally Triton's encoder is a python-backend `model.py`, not the onnxruntime
# backend a GPU node uses, and the client sits on loopback: no network cost, unlike the source's measurements.

# %% tags=["parameters"]
harness = {}              # where this runs: filled by `servelab lab run` ({}: this place's defaults)
link = "wan-100mbit-20ms"  # a shaped client-server link measured beside loopback ("": loopback only)
concurrency_levels = [1, 8]

# %%
from servelab.lab.session import session

lab = session("06a", globals())  # endpoints, model names, results folder and load profile of this run

# %%
from servelab.bench.experiments import compare_servers, concurrency_sweep
from servelab.bench.report import idle_sentence
from servelab.bench.servers import served

step = lab.step
opts = lab.load
cols = ["server", "payload", "concurrency", "throughput_img_s", "throughput_min_img_s", "throughput_max_img_s",
        "latency_p50_ms", "latency_p99_ms", "latency_mean_ms", "server_stats.avg_batch", "memory.rss_mb", "stable"]


def sweep(srv, payload="jpeg", measured=()):
    """One server across the concurrency levels; a point among `measured` (the sides of an interleaved
    comparison) is taken from there instead of being measured again."""
    return concurrency_sweep(step.run, srv, concurrencies=tuple(concurrency_levels), payload=payload, opts=opts,
                             experiment="06a-three-way", measured=measured)


# %% [markdown]
# ## The ensemble Triton serves for JPEGs
# The client sends the file's bytes as a `BYTES` tensor named `IMAGE`; Triton runs the preprocessing model,
# then the encoder, passing the 602 KB tensor between them inside the server:

# %%
from pathlib import Path

from servelab.lab.step import show_code
from servelab.triton.repository import STAGING

repository = Path(lab.triton_repository)
if not (repository / lab.triton_jpeg_model).is_dir():  # not this machine's Triton (e.g. the node's): read its template
    repository = STAGING / ("gpu" if lab.place == "node" else "cpu")
show_code(repository / lab.triton_jpeg_model / "config.pbtxt", "name:", lang="protobuf")

# %% [markdown]
# ## Same requests, three servers
# **Predict first.** The engine and the cores are the same for all three. At the highest concurrency, will
# one server deliver clearly more images per second than the others — more than the spread between
# measurement windows — or will they be indistinguishable? Which overheads could separate them?
#
# The verdict comes from alternating windows at the highest concurrency (FastAPI against Triton, FastAPI
# against LitServe), the waiting server paused and its idle CPU use shown beside the ratio (docs/METHOD.md); the
# sweeps add the other levels.

# %%
from servelab.client import InferenceClient


def service_batches() -> dict:
    """The batches the service has run so far (its /info): on its instances side by side, or alone on all cores
    ({} when it runs one session: a GPU, one core)."""
    with InferenceClient(mode="remote", backend="fastapi", url=lab.service_url) as remote:
        return dict(((remote.info().get("engine") or {}).get("instances") or {}).get("batches_run") or {})


fastapi = lab.attach("fastapi", payload="jpeg")
triton_http = lab.attach("triton-http", payload="jpeg", jpeg_model=lab.triton_jpeg_model)
# the verdict: alternating windows at the highest concurrency, where drift cancels
ran_before = service_batches()
head_to_head = compare_servers(step.run, fastapi, triton_http, concurrencies=(max(concurrency_levels),),
                               payload="jpeg", opts=opts, experiment="06a-servelab-vs-triton")
ran_during = {k: v - ran_before.get(k, 0) for k, v in service_batches().items()}  # at the highest concurrency only
recs = sweep(fastapi, measured=head_to_head) + sweep(triton_http, measured=head_to_head)
peer = []  # servelab ÷ LitServe at the highest concurrency, measured in alternating windows (drift cancels)
if step.skip_unless(lab.extra_servers, "LitServe peer baseline", "extra_servers=False (smoke profile)",
                    "FastAPI service and Triton compared"):
    with served("litserve", engine="onnx", payload="jpeg", log_path=step.out_dir / "logs" / "litserve.log") as litserve:
        ran_before = service_batches()
        peer = compare_servers(step.run, fastapi, litserve, concurrencies=(max(concurrency_levels),), payload="jpeg",
                               opts=opts, experiment="06a-servelab-vs-litserve")
        ran_during = {k: v - ran_before.get(k, 0) + ran_during.get(k, 0) for k, v in service_batches().items()}
        recs += sweep(litserve, measured=peer)
three_way = step.table(step.frame(recs, *cols), "three_way", "Three servers, batch-1 JPEG requests")
interleaved = step.table(step.frame([r for r in head_to_head + peer if r["kind"] == "ab"], "a", "b", "concurrency", "ratio",
                      "ratio_min", "ratio_max", "stable", "idle_cpu_pct_a", "idle_cpu_pct_b", "idle_paused_a",
                      "idle_paused_b"),
           "interleaved", "Alternating windows: throughput A ÷ B, each side's idle CPU (% of one core) and whether "
           "it was stopped during the other's windows")

# %% [markdown]
# ### Exercise: pick the backend
# The photo finder sends one JPEG per request from many workers at once. Which server measured above
# would you put behind it?

# %% tags=["exercise"]
# Exercise 06a.1: choose the backend for many concurrent JPEG clients
def best_backend(three_way):
    """The `server` with the highest throughput_img_s at the highest concurrency measured."""
    # BEGIN SOLUTION
    busiest = three_way[three_way["concurrency"] == three_way["concurrency"].max()]
    return busiest.loc[busiest["throughput_img_s"].idxmax(), "server"]
    # END SOLUTION


# %%
from servelab.assignments import checks

checks.best_choice(best_backend, step.frame(recs), key="server", metric="throughput_img_s",  # with window spread
                   at={"concurrency": max(concurrency_levels)}, exercise="06a.1", step=step,
                   pairs=[r for r in head_to_head + peer if r["kind"] == "ab"])  # pairs measured together: their windows

# %%
hi = max(concurrency_levels)
busiest = [r for r in recs if r["concurrency"] == hi]
# the verdict is each alternating-window comparison; a pair of servers never measured together (Triton and LitServe)
# is read apart, from points taken minutes apart, and said to be so
together = [{m[0]["server"], m[1]["server"]} for m in (head_to_head, peer) if m]
apart = [(a, b) for i, a in enumerate(busiest) for b in busiest[i + 1:] if {a["server"], b["server"]} not in together]
step.answer(f"At concurrency {hi}, in alternating windows (the verdict): "
            + "; ".join(step.ratio(measured[-1]) for measured in (head_to_head, peer) if measured) + "."
            + "".join(f" {idle_sentence(measured[-1])}." for measured in (head_to_head, peer) if measured)
            + "".join(f" {a['server']} and {b['server']} were never measured together: read apart, from windows of "
                      f"different comparisons, {step.versus(a['server'], a, b['server'], b)}." for a, b in apart)
            + (" The table's points at this concurrency come from those comparisons; where their bands and the "
               "alternating windows disagree, the windows hold (the check above reads them too)." if peer else ""))

# %%
from servelab.bench.report import plot_latency_throughput, plot_server_breakdown

step.show_plot(plot_latency_throughput(recs, step.plot_path("three_way")))

# %% [markdown]
# ## Where the time goes (Triton, binary tensors to the encoder)
# Triton reports, per request, the time spent waiting in the scheduler queue and in compute (input copy,
# inference, output copy). The client's mean latency minus the server's request time is everything
# outside the server: serialisation, the network stack, HTTP parsing.

# %% [markdown]
# **Predict first.** On loopback, what share of the client's mean latency will fall *outside* Triton — more
# or less than 10 %? And how will the queueing share change from concurrency 1 to the highest concurrency?

# %%
from servelab.lab.latency_breakdown import BREAKDOWN_COLUMNS, breakdown_table

# notebook 04 of this lab run measured this Triton with these requests at these concurrencies: a lab run takes each
# point once, so those records are used here (`measured=`); a notebook run on its own measures them now
tensor_recs = sweep(lab.attach("triton-http"), payload="tensor", measured=step.earlier("04"))
print("from notebook 04 of this run:", [f"concurrency {r['concurrency']}" for r in tensor_recs if r["experiment"][:3] == "04-"]
      or "none (measured here)")
breakdown = step.table(breakdown_table(step.frame(tensor_recs, *BREAKDOWN_COLUMNS)), "breakdown",
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
lo_row, hi_row = breakdown.iloc[0], breakdown.iloc[-1]


def outside(row):
    """The time outside the server, or why none is measurable (Triton's averages span slightly other requests)."""
    if row["outside_server_ms"] < 0:
        return f"no time measurable outside the server (its averages exceed the client's by {-row['outside_server_ms']:.0f} ms)"
    return (f"{row['outside_server_ms']:.0f} ms outside the server "
            f"({100 * row['outside_server_ms'] / row['client_mean_ms']:.0f} %)")


queue_grew = hi_row["server_queue_ms"] > lo_row["server_queue_ms"]
step.answer(f"At concurrency {int(lo_row['concurrency'])} a request's {lo_row['client_mean_ms']:.0f} ms split into "
            f"{lo_row['server_queue_ms']:.0f} ms queueing, {lo_row['server_compute_ms']:.0f} ms compute and "
            f"{outside(lo_row)}; at concurrency {int(hi_row['concurrency'])}: {hi_row['server_queue_ms']:.0f} ms queueing "
            f"({100 * hi_row['server_queue_ms'] / hi_row['client_mean_ms']:.0f} % of {hi_row['client_mean_ms']:.0f} ms), "
            f"{hi_row['server_compute_ms']:.0f} ms compute and {outside(hi_row)}. "
            + ("Queueing grew with concurrency: the requests beyond the batch running wait for it to end."
               if queue_grew else "Queueing did not grow with concurrency in these points."))


# %% [markdown]
# ### Exercise: write a python-backend `execute`
# Triton's python backend calls `execute(self, requests)` with a *list* of requests — as many as the dynamic
# batcher collected — and expects a list of responses, one per request, in the same order. Write the
# `execute` of a small model that L2-normalises embeddings: input `embedding` (FP32, `[n, 512]` per request),
# output `unit_embedding`, each row divided by its own length. In model.py, `np` is numpy and `pb_utils` is
# `triton_python_backend_utils`:
# `pb_utils.get_input_tensor_by_name(request, name).as_numpy()`, `pb_utils.Tensor(name, array)`,
# `pb_utils.InferenceResponse(output_tensors=[...])`.
# The check stages your function as a model.py beside the encoder, loads it, sends six requests at once (so
# `execute` gets several), and unloads it again.

# %% tags=["exercise"]
# Exercise 06a.3: write the execute of a python-backend model that L2-normalises embeddings
import numpy as np  # model.py imports numpy as np and triton_python_backend_utils as pb_utils


def execute(self, requests):
    """One InferenceResponse per request, in order; `unit_embedding` = each `embedding` row / its L2 norm."""
    # BEGIN SOLUTION
    responses = []
    for request in requests:
        rows = pb_utils.get_input_tensor_by_name(request, "embedding").as_numpy()  # noqa: F821 (model.py's import)
        unit = (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)
        responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("unit_embedding", unit)]))  # noqa: F821
    return responses
    # END SOLUTION


# %%
checks.python_backend_execute(execute, triton_http_url=lab.triton_http_url,
                              repository=lab.triton_repository if lab.place == "local" else None,
                              exercise="06a.3", step=step)

# %% [markdown]
# ### Exercise: one JPEG to the ensemble, by hand
# Send one yourself with `tritonclient.http`: input `IMAGE`, type `BYTES`, shape `[batch, 1]`, holding the file's
# bytes in a numpy object array; output `embedding`.

# %% tags=["exercise"]
# Exercise 06a.4: send one JPEG's bytes to the JPEG ensemble with tritonclient
import tritonclient.http as httpclient


def embed_jpeg(url, model, jpeg):
    """The `embedding` output ([1, 512] FP32) of the ensemble `model` at `url` (host:port) for one JPEG file's bytes."""
    # BEGIN SOLUTION
    client = httpclient.InferenceServerClient(url)
    image = httpclient.InferInput("IMAGE", [1, 1], "BYTES")
    image.set_data_from_numpy(np.array([[jpeg]], dtype=object))
    return client.infer(model, [image]).as_numpy("embedding")
    # END SOLUTION


# %%
from servelab.bench.load.inputs import sample_jpegs
from servelab.client import InferenceClient

encoder = InferenceClient(mode="remote", backend="triton-http", url=lab.triton_http_url, payload="tensor",
                          model=lab.triton_model)  # preprocessing here, the encoder alone in Triton
checks.triton_jpeg_call(embed_jpeg, triton_http_url=lab.triton_http_url, model=lab.triton_jpeg_model,
                        photo=sample_jpegs(1, seed=11)[0], embed_images=encoder.embed_images, exercise="06a.4",
                        step=step)

# %%
step.show_plot(plot_server_breakdown(tensor_recs, step.plot_path("server_breakdown")))

# %% [markdown]
# ## Why they come out where they do
# Each server computes inside `session.run`. LitServe and Triton (as staged) run one session
# on all cores, one batch at a time: its threads split every operator of an image and meet after each one, a
# few hundred times per image. Such a server is held to throughput ≈ 1 / (compute time per image at the batches
# it forms, notebook 04's batch table, + its own per-image overhead: decoding, base64, the python backend's
# copies to its stub). servelab's service, once requests overlap, runs single-thread instances, one per core, each on its own batch
# (06b does the same for Triton): they never meet, and while one core decodes a JPEG only its instance waits.
# On a GPU the compute shrinks to a few milliseconds and the overheads, and the network, become the whole story.

# %%
with InferenceClient(mode="remote", backend="fastapi", url=lab.service_url) as remote:
    instances = (remote.info().get("engine") or {}).get("instances")  # None: one session (a GPU, one core)
# the ceiling is measured, not derived: Triton's compute per request counts a batch's time once for every request in
# it, so dividing it by the average batch (per execution) does not give a time per image. It is measured here, just
# after the JPEG servers: a two-thread session's speed moves with the host, so notebook 04's point may be another speed
bare = concurrency_sweep(step.run, lab.attach("triton-http"), concurrencies=(hi,), payload="tensor", opts=opts,
                         experiment="06a-ceiling")[0]  # Triton sent tensors: one session, nothing decoded
ceiling = bare["throughput_img_s"]
top = max(busiest, key=lambda r: r["throughput_img_s"])
best = top["throughput_img_s"]
ran = (f" During the {max(concurrency_levels)}-client comparisons, servelab's service ran "
       f"{ran_during.get('one_instance', 0)} batches on its {instances['count']} instances of "
       f"{instances['threads_each']} thread(s), side by side, and {ran_during.get('all_cores', 0)} alone on all cores "
       "(a batch that finds the engine idle takes every core)."
       if instances else " servelab's service runs one session here, like the others.")
from servelab.bench.report import apart_reading

probes = [r for r in step.run.records if r.get("kind") == "probe" and r.get("throughput_img_s")]  # the lab's drift probes
speeds = [float(r["throughput_img_s"]) for r in probes]
host = (f" The last drift probe (before {(probes[-1].get('params') or {}).get('before', 'this notebook')}), one "
        f"two-thread session like Triton's encoder and LitServe's, measured {speeds[-1]:.1f} img/s (this run's "
        f"probes: {min(speeds):.1f}–{max(speeds):.1f}): such a session's speed moves with the host, so the ratios "
        "above hold for the moment this run measured them." if len(speeds) >= 2 else "")
reading = apart_reading(top, bare, drift=step.machine_drift)  # a lead this run can call, either way
instances_lead = instances and top["server"] == "fastapi"  # the only server here not held to one session
why = ("" if not reading.ranked else
       ". Instances on separate cores do not wait for each other, so they are not held to one session's figure"
       if reading.ahead == "a" and instances_lead else
       ". A one-session server above the one-session figure: measured apart, the host's speed moved between them"
       if reading.ahead == "a" else
       ". What lies between them is that JPEG server's own work around the engine: decoding, copies, HTTP")
step.answer(f"Sent binary tensors at concurrency {hi}, just after, Triton delivered {ceiling:.1f} img/s: one session "
            "of the engine with nothing decoded in the server. The best JPEG server here, "
            f"{top['server']}, delivered {100 * best / max(ceiling, 1e-9):.0f} % of it: "
            + step.versus(top["server"], top, "Triton with tensors", bare) + why + "." + ran + host)


# %% [markdown]
# ## Measured: JPEGs to the service and tensors to Triton, across a WAN-like link
# The two request paths the source material compared over the internet (one JPEG per request to the FastAPI
# service, one float32 tensor per request to Triton) are measured with the client behind a shaped link (`link`:
# 100 Mbit/s each way, 20 ms round trip), in windows alternating with loopback. `params.link_shaping` says how the
# link was made; the CPU columns are % of one core.
#
# **Predict first.** Which path will the link slow down more, and by roughly how many milliseconds?

# %%
from servelab.bench.experiments import Side, ab
from servelab.bench.load.cpu import CpuMeter
from servelab.bench.servers.link import link_effect, link_profile, network_link

triton_tensor = lab.attach("triton-http")
link_sides, link_ab = [], []
if link:
    with network_link("loopback", fastapi, triton_tensor) as lo, network_link(link, fastapi, triton_tensor) as wan:
        for srv in (fastapi, triton_tensor):
            a, b, r = ab(step.run, "06a-link", Side("loopback", lo.over(srv)), Side(link, wan.over(srv)),
                         opts=opts, meters=[CpuMeter(server_pid=srv.pid, link_pid=wan.pid)])
            link_sides += [a, b]
            link_ab.append(r)
    prof = link_profile(link)
    gap = prof.transfer_ms(link_sides[3]["payload_bytes_per_request"]) - prof.transfer_ms(link_sides[1]["payload_bytes_per_request"])
    triton_p50 = link_sides[2]["latency_p50_ms"]
    step.table(step.frame(link_sides, "server", "payload", "params.link", "payload_bytes_per_request",
                          "throughput_img_s", "throughput_min_img_s", "throughput_max_img_s", "latency_p50_ms",
                          "latency_p50_min_ms", "latency_p50_max_ms", "stable", "loadgen_cpu_pct", "server_cpu_pct",
                          "link_cpu_pct", "params.link_shaping"),
               "link", f"JPEG to the service and tensor to Triton, over loopback and over {link} (concurrency 1)")
    step.answer("; ".join(link_effect(lo_rec, wan_rec, link, name=f"{wan_rec['payload']} to {wan_rec['server']}")
                          + "; " + step.ratio(r)
                          for lo_rec, wan_rec, r in zip(link_sides[::2], link_sides[1::2], link_ab, strict=True))
                + f". Before either server does any work, the tensor path pays {gap:.0f} ms more per request than "
                f"the JPEG path on this link, {100 * gap / triton_p50:.0f} % of Triton's loopback p50 here "
                f"({triton_p50:.0f} ms): the faster the server, the more the bytes on the wire decide.")
else:
    step.not_run("the two paths over a shaped link", 'link="" (loopback only)', "loopback measured above")

# %% [markdown]
# ## Compared with the source material
# - **Photo-dedup "Technical Deep-Dive", step 6A** (A100 and RTX 4080, client over the internet): Triton
#   computed an image in 4.4 ms on the A100 but the client waited 182.9 ms, 91.7 % of it moving the 602 KB
#   tensor; PyTorch behind FastAPI, sent ~10 KB JPEGs, answered in 56.9 ms. Sending JPEGs is its fix.
# - **Chameleon lab** (P100): Triton's onnxruntime backend instead of the python one took one client from 51.5
#   to 138 inferences/s, a step this machine's Triton (python backend only) cannot take.
#
# The H100 reference (`reference/nvidia-h100-80gb-hbm3/`) is printed under the headline; `SOURCES.md` lists the
# write-ups and their hardware.

# %%
hi_c = max(concurrency_levels)
r = breakdown[breakdown["concurrency"] == hi_c].iloc[0]
step.shows(
    f"At concurrency {hi_c}, measured in alternating windows: "
    + "; ".join(step.ratio(measured[-1]) for measured in (head_to_head, peer) if measured)
    + "".join(f". {idle_sentence(measured[-1])}" for measured in (head_to_head, peer) if measured)
    + f". In Triton, a request's {r['client_mean_ms']:.0f} ms (client mean) split into "
    f"{r['server_queue_ms']:.0f} ms queueing, {r['server_compute_ms']:.0f} ms compute and "
    + (f"{r['outside_server_ms']:.0f} ms outside the server." if r["outside_server_ms"] >= 0 else
       f"no time measurable outside the server (its own averages, taken over a slightly different span, exceed "
       f"the client's mean by {-r['outside_server_ms']:.0f} ms).")
)

