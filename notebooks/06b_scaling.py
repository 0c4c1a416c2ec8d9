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
# # 06b · Scaling: instance groups, efficiency, cost per 1,000 images
#
# Stuck on an error? [When something goes wrong](../docs/TROUBLESHOOTING.md) has the messages and their fixes.
# How a measurement is read here (windows, drift, alternating windows, and when a lead is ranked): [How this lab reads a measurement](../docs/METHOD.md).
#
# **After this notebook you can**
# - write an `instance_group` that places model copies on CPUs or on chosen GPUs;
# - compute scaling efficiency and cost per 1,000 images from a measurement;
# - predict when another copy of a model adds throughput (idle hardware it can use) and when it only adds
#   contention (hardware the first copy already saturates).
#
# Triton runs `count` copies of a model per device (`instance_group`). This notebook measures what each count
# buys: throughput and p50 by concurrency, **scaling efficiency** and **cost per 1,000 images**.
#
# ```mermaid
# flowchart TB
#   Q[(Triton scheduler queue)]
#   subgraph CPU[a CPU with n cores]
#     I1[instance 1<br/>ONNX Runtime, n threads]
#     I2[instance 2<br/>ONNX Runtime, n threads]
#   end
#   subgraph NODE[GPU node: one group per GPU]
#     G0[GPU 0<br/>instances 1..k]
#     G1[GPU 1<br/>instances 1..k]
#   end
#   Q --> I1 & I2
#   Q -.-> G0 & G1
# ```
#
# **Honest framing.** Extra instances help only if there is hardware the first one leaves idle. On a CPU one
# instance already runs ONNX Runtime on every core, so a second splits the same cores and adds memory and
# context switches: by the compute arithmetic, the same total throughput, an efficiency of 1/n. The
# configuration to compare never asks for more threads than cores, **threads per instance × instances =
# cores**; you will write it into the model's `config.pbtxt` and load it into the running Triton yourself.

# %% tags=["parameters"]
harness = {}              # where this runs: filled by `servelab lab run` ({}: this place's defaults)
instance_counts = [1, 2]
concurrency_levels = [1, 8]
price_per_hour = 0.50     # USD per hour for the machine serving (set your own: cloud list price, lease cost)
device_profile = "vit-b32-h100"  # the emulated accelerator's profile (servelab.model.device_profile), or a *.json file
trial_limit = 8           # the open assignment: at most this many trials, each a reload and a short measurement

# %%
from servelab.lab.session import session

lab = session("06b", globals())  # endpoints, model names, results folder and load profile of this run

# %%
import pandas as pd

from servelab.bench.experiments import instance_scaling
from servelab.bench.report import cost_table
from servelab.lab.step import show_commands

step = lab.step
opts = lab.load
triton = lab.attach("triton-http")

# %% [markdown]
# ## Instance count × concurrency
# Triton reloads the model with each count (repository API, no restart) and restores its own. Each copy keeps
# the staged threads of one instance (all the cores), so two copies ask for twice as many threads as cores.
#
# **Predict first.** Using the arithmetic above: at the highest concurrency, what throughput will two
# instances reach relative to one — about 2×, about 1×, or less than 1×? And what will happen to p50?

# %%
top_c = max(concurrency_levels)
n_lo, n_hi = min(instance_counts), max(instance_counts)
recs = instance_scaling(step.run, triton, counts=tuple(instance_counts), concurrencies=tuple(concurrency_levels),
                        opts=opts, experiment="06b-instances")  # reloads per count, restores
points = step.frame(recs, "params.instances", "concurrency", "throughput_img_s", "throughput_min_img_s",
                    "throughput_max_img_s", "latency_p50_ms", "latency_p99_ms", "stable", "server_stats.avg_batch",
                    "memory.rss_mb").rename(columns={"params.instances": "instances"})

# %% [markdown]
# ### Exercise: scaling efficiency
# Before the table below computes it: how well did extra instances pay off under the heaviest load?
# Efficiency with n instances is throughput(n) ÷ (n/n₀ × throughput(n₀)), n₀ the smallest count measured;
# 1.0 means each added copy brought its full share.

# %% tags=["exercise"]
# Exercise 06b.1: compute scaling efficiency from the scaling table
def efficiency_by_instances(points):
    """{instances: efficiency} at the highest concurrency measured (points: one row per instances ×
    concurrency with throughput_img_s)."""
    # BEGIN SOLUTION
    loaded = points[points["concurrency"] == points["concurrency"].max()].set_index("instances")["throughput_img_s"]
    smallest = loaded.index.min()
    return {n: float(loaded[n] / ((n / smallest) * loaded[smallest])) for n in loaded.index}
    # END SOLUTION


# %%
from servelab.assignments import checks

checks.scaling_efficiency(efficiency_by_instances, points[points["concurrency"] == max(concurrency_levels)],
                          units_col="instances", exercise="06b.1", step=step)

# %% [markdown]
# ## Threads × instances = cores: your configuration, loaded by hand
# The sweep's second copy brought a whole machine's threads with it. The configuration worth comparing gives
# each copy its share: **2 instances × 1 thread** against the staged **1 instance × 2 threads** (with more cores,
# `cores ÷ 2` threads each). Two settings in `config.pbtxt` decide it: `instance_group`'s `count`, and the
# intra-op threads per instance, which our python-backend model reads from its `intra_op_threads` parameter
# (the onnxruntime backend calls it `intra_op_thread_count`). The third knob, `intra_op_spinning`, comes later.
#
# This is the file the running Triton loaded:

# %%
import json
import os
from pathlib import Path

from servelab.lab.step import show_code

config_file = Path(lab.triton_repository) / lab.triton_model / "config.pbtxt"
if config_file.is_file():
    show_code(config_file, "instance_group", lang="protobuf")

# %% [markdown]
# **Your turn.** Write the stanzas you change. The cell below puts your `instance_group` in place of the file's
# and your `parameters` over its own (by key) and prints the edited `config.pbtxt`. Then you load it into the
# running Triton yourself: one repository-API request, tritonclient's `load_model(name, config=<the config as
# JSON>)`, the same request as
#
# ```bash
# # runs here, against the lab's Triton (HTTP port 8003 unless the run chose another: `triton_http_url`)
# curl -X POST localhost:8003/v2/repository/models/openclip_vit_b32_cpu/load -H "servelab-admin-key: $KEY" \
#      -d '{"parameters": {"config": "{\"instance_group\": [{\"kind\": \"KIND_CPU\", \"count\": 2}], ...}"}}'
# ```
#
# Every repository request carries the server's key (`headers=lab.triton_headers`): a load may bring code that
# Triton runs (docs/SECURITY.md). A load without `config` may keep yours
# ([why](../docs/TROUBLESHOOTING.md#a-load-without-config-keeps-the-configuration-you-loaded)), so the cell after
# the check sends the file's own text. Try a count of 3, or more threads than cores, and read what the
# server reports.

# %%
cores = int(step.environment.get("cpu_usable") or os.cpu_count())
threads_each = max(1, cores // 2)  # threads × instances = cores
my_edit = f"""
instance_group [ {{ kind: KIND_CPU, count: 2 }} ]
parameters {{ key: "intra_op_threads", value: {{ string_value: "{threads_each}" }} }}
parameters {{ key: "intra_op_spinning", value: {{ string_value: "1" }} }}
"""

# %%
import tritonclient.http as httpclient

from servelab.lab.config_text import as_json, edited

show_code(edited)
cpu_hands = config_file.is_file() and not triton.gpus  # a CPU model in a repository this notebook can read
not_here = "this Triton's encoder runs on a GPU" if triton.gpus else f"{config_file} is not readable here"
my_text = None
if step.skip_unless(cpu_hands, "the threads × instances configuration loaded by hand", not_here, "the instance sweep above"):
    staged_text = config_file.read_text()
    my_text = edited(staged_text, my_edit)
    print(my_text[my_text.index("instance_group"):])

# %% tags=["exercise"]
# Exercise 06b.4: load your configuration into the running Triton with one repository-API request
def load_mine(client, model, config_text):
    """Load `model` with `config_text` (config.pbtxt text; `as_json` converts it) through `client`, a
    tritonclient.http InferenceServerClient, carrying the server's key (lab.triton_headers)."""
    # BEGIN SOLUTION
    client.load_model(model, config=as_json(config_text), headers=lab.triton_headers)
    # END SOLUTION


# %%
checks.loaded_config(load_mine, triton_http_url=lab.triton_http_url, model=lab.triton_model, config_text=my_text,
                     unavailable=not_here, exercise="06b.4", step=step)

# %%
if my_text is not None:
    client = httpclient.InferenceServerClient(lab.triton_address)
    loaded = client.get_model_config(lab.triton_model)
    print("loaded:", loaded["instance_group"], {k: v["string_value"] for k, v in loaded["parameters"].items()
                                                if k.startswith("intra_op")})
    client.load_model(lab.triton_model, headers=lab.triton_headers)  # no config: from the repository, if Triton sees the files changed
    print("after a load without config:", client.get_model_config(lab.triton_model)["instance_group"][0]["count"],
          "instance(s)")
    client.load_model(lab.triton_model, config=as_json(staged_text), headers=lab.triton_headers)  # the file's own config, sent as an override
    print("the file's config again:", client.get_model_config(lab.triton_model)["instance_group"][0]["count"],
          "instance(s)")
    client.close()

# %% [markdown]
# **Predict first.** Your configuration against the staged one at the highest concurrency, in alternating
# windows: both use every core once. Will two one-thread copies serve more images per second than one
# two-thread copy, fewer, or the same? And which has the lower p50 — what does one request wait for in each?
# The sweep measured one configuration minutes after the other; here `config_switch` loads the other config
# each time the side changes, so drift cancels in the ratio.

# %%
import dataclasses

from servelab.bench.experiments import Side, ab, instances_ab
from servelab.bench.report import Grade, grade, ratio_verdict
from servelab.triton.control import config_switch

if cpu_hands:
    mine = json.loads(as_json(my_text))
    staged = json.loads(as_json(staged_text))
    two = dataclasses.replace(triton, instances=2, settings={**triton.settings, "threads": threads_each})
    one = dataclasses.replace(triton, instances=1, settings={**triton.settings, "threads": cores})
    with config_switch(lab.triton_http_url, lab.triton_model, [mine, staged]) as use:
        instance_ab = ab(step.run, "06b-threads-instances",
                         Side(f"2 instances x {threads_each} thread(s)", two, concurrency=top_c),
                         Side(f"1 instance x {cores} threads", one, concurrency=top_c), opts=opts, prepare=use)
else:  # on a GPU the copies share the GPU: the most instances against the fewest
    instance_ab = instances_ab(step.run, triton, instances=(n_hi, n_lo), concurrency=top_c, opts=opts,
                               experiment="06b-instances-ratio")
instance_ratio = instance_ab[-1]
print(step.ratio(instance_ratio))

# %%
busy = {r["params"]["instances"]: r for r in recs if r["concurrency"] == top_c}
swept = busy[n_hi]["throughput_img_s"] / busy[n_lo]["throughput_img_s"]
eff = swept / (n_hi / n_lo)
ahead, _ = ratio_verdict(instance_ratio)
a_rec, b_rec = instance_ab[0], instance_ab[1]
sweep_text = (f"At concurrency {top_c} in the sweep: {n_lo} instance(s) {busy[n_lo]['throughput_img_s']:.1f} img/s at "
              f"p50 {busy[n_lo]['latency_p50_ms']:.0f} ms, {n_hi} instances {busy[n_hi]['throughput_img_s']:.1f} img/s at "
              f"p50 {busy[n_hi]['latency_p50_ms']:.0f} ms (measured apart: {swept:.2f}×, a scaling efficiency of "
              f"{eff:.2f}; the arithmetic predicts about {n_lo / n_hi:.2f}). ")
if cpu_hands:
    reasons = {
        instance_ratio["a"]: "The two copies came out ahead: while one copy is in Python and HTTP (reading a request, "
                             "writing its answer) the other computes, so the cores idle less than with one copy whose "
                             "two threads both wait for the same request.",
        instance_ratio["b"]: "One copy came out ahead: its two threads finish each batch in about half the time one "
                             "thread takes, while each of two copies runs its own batch on one core, so the work per "
                             "image is the same and what differs is the overhead of a second copy and its threads.",
        None: "Both configurations use every core once, so neither has idle hardware to add: what they share is the "
              "same compute, split by requests or by threads.",
    }
    step.answer(sweep_text + f"Your configuration against the staged one, in alternating windows: "
                f"{step.ratio(instance_ratio)}; p50 {a_rec['latency_p50_ms']:.0f} ms against "
                f"{b_rec['latency_p50_ms']:.0f} ms, average executed batch "
                f"{(a_rec.get('server_stats') or {}).get('avg_batch') or float('nan'):.1f} against "
                f"{(b_rec.get('server_stats') or {}).get('avg_batch') or float('nan'):.1f}. " + reasons[ahead]
                + " The sweep's second copy, with a whole machine's threads, had the same cores to share and more "
                  "threads than cores taking turns on them.")
else:
    step.answer(sweep_text + f"In alternating windows: {step.ratio(instance_ratio)}.")

# %% [markdown]
# ### The third knob: spinning
# With `intra_op_spinning` "1" (the staged default, and onnxruntime's), threads that finish their share of a run
# busy-wait instead of sleeping, so the next run starts without waking them, while the same cores also run
# Triton's HTTP front end, the python-backend stub and the load generator.
#
# **Predict first.** The staged one instance × 2 threads, with spinning on against spinning off, at the same
# concurrency in alternating windows: which serves more images per second? Would your answer change at
# concurrency 1, where the threads wait for the next request after every run?

# %%
spin_ab = None
if step.skip_unless(cpu_hands, "spinning on and off", not_here, "the threads × instances comparison above"):
    spin_off_text = edited(staged_text, 'parameters { key: "intra_op_spinning", value: { string_value: "0" } }')
    off = dataclasses.replace(one, settings={**one.settings, "spinning": False})
    with config_switch(lab.triton_http_url, lab.triton_model, [json.loads(as_json(spin_off_text)), staged]) as use:
        spin_ab = ab(step.run, "06b-spinning", Side("spinning off", off, concurrency=top_c),
                     Side("spinning on", one, concurrency=top_c), opts=opts, prepare=use)
    print(step.ratio(spin_ab[-1]))

# %%
if spin_ab is not None:
    spin_ratio = spin_ab[-1]
    spin_ahead, _ = ratio_verdict(spin_ratio)
    off_rec, on_rec = spin_ab[0], spin_ab[1]
    spin_reasons = {
        spin_ratio["a"]: "Turning spinning off came out ahead: between runs the spinning thread held a core that the "
                         "HTTP front end and the stub needed to get the next batch ready, so each run started later.",
        spin_ratio["b"]: "Spinning came out ahead: at this concurrency the next batch is usually ready the moment the "
                         "last one ends, so the thread that spins is caught awake and the wake-up a sleeping thread "
                         "needs is saved on every run.",
        None: "At this concurrency a new batch is usually waiting when a run ends, so the threads are rarely idle "
              "long enough for spinning to cost or save much.",
    }
    step.answer(f"One instance × {cores} threads at {top_c} clients: {step.ratio(spin_ratio)}; p50 "
                f"{off_rec['latency_p50_ms']:.0f} ms against {on_rec['latency_p50_ms']:.0f} ms. "
                + spin_reasons[spin_ahead] + " At one client the gaps between runs are long: this run did not "
                  "measure spinning there.")

# %%
one = points[points["instances"] == min(instance_counts)].set_index("concurrency")["throughput_img_s"]
points["efficiency"] = points.apply(lambda r: r["throughput_img_s"] / (r["instances"] / min(instance_counts) * one[r["concurrency"]]),
                                    axis=1)
cost = pd.DataFrame(cost_table(recs, price_per_hour))
cost_col = "cost_USD_per_1000_img"
for col in (cost_col, "cost_min_USD_per_1000_img", "cost_max_USD_per_1000_img"):
    points[col] = cost[col].values
scaling = step.table(points.round(4), "scaling", f"Throughput, p50, efficiency and cost per 1,000 images at "
                                                 f"{price_per_hour} USD/hour, by instance count and concurrency")

# %%
from servelab.bench.report import plot_latency_throughput, plot_scaling

step.show_plot(plot_scaling(recs, step.plot_path("scaling_efficiency")))
step.show_plot(plot_latency_throughput(recs, step.plot_path("latency_vs_throughput")))

# %% [markdown]
# **Cost per 1,000 images** is price per hour ÷ (images per second × 3,600) × 1,000: at a fixed price the
# cheapest configuration is simply the one with the most throughput, and adding hardware pays only if
# throughput grows at least as fast as the bill.

# %% [markdown]
# ## The same question on an emulated accelerator: instances and devices
# In front of a GPU a second instance shares a device that one batch leaves mostly idle. On the lab's emulated
# device (`openclip_vit_b32_emulated`, notebook 04; an emulation, never a GPU measurement), batches that overlap
# finish as one batch of their combined size would, as kernels share a GPU's multiprocessors: free while the
# device has room (t flat), full price once it is full (t linear). With one instance and no delay, N clients
# take turns in two groups: a round is t(a) + t(b). Two instances on one device run both groups at once, t(N);
# two devices (instance k on device k mod their count) give each group its own, max(t(a), t(b)).
#
# **Predict first.** From the profile: at the highest concurrency, what will two instances on one device
# give over one? Then on a device that is full at 4 images (the `flat` profile), with batches of 4 and 8
# clients: what will a second instance give, and what will a second device give?

# %%
from servelab.bench.experiments import emulated_lesson as emulated
from servelab.lab.batching_tables import ratio_columns
from servelab.model.device_profile import profile as device_profile_named

emu_profile = device_profile_named(device_profile)
flat = device_profile_named("flat")
full_c = 2 * flat.full_at  # two groups of full batches: enough clients to fill the flat device twice over
emu_ready = step.skip_unless(lab.place != "node" and emulated.available(lab.triton_http_url),
                             "instances and devices on the emulated accelerator", "this Triton has no "
                             "openclip_vit_b32_emulated model (a GPU node's repository has none: it has the GPU "
                             "itself)", "the measurements above")
if emu_ready:  # instances on the lesson's device; then instances and devices on one that batches of 4 fill
    emu = emulated.compare(step.run, lab.triton_http_url, step.out_dir,
                           emulated.lesson_plan("06b", device_profile, concurrency_levels), opts)
    emu_instances, full_instances, emu_devices = emu.pairs.values()  # instances, full-instances, devices
    emu_points = step.frame(emu_instances[:2] + full_instances[:2] + emu_devices[:1], "params.device",
                            "params.max_batch", "params.instances", "params.devices", "concurrency",
                            "throughput_img_s", "throughput_min_img_s", "throughput_max_img_s", "latency_p50_ms",
                            "server_stats.avg_batch", "stable")
    step.table(emu_points.rename(columns={"params.device": "device", "params.max_batch": "max_batch_size",
                                          "params.instances": "instances", "params.devices": "devices"}),
               "emulated_instances_devices",
               f"{emu.caption}: instances and devices (batch-1 clients, dynamic batching without delay)")

# %%
if emu_ready:
    inst_pred = emulated.two_instances_gain(emu_profile, top_c)
    full_pred = emulated.two_instances_gain(flat, full_c)
    dev_pred = emulated.two_devices_gain(flat, full_c)
    # room: a second device would add nothing a run can call, because one batch of all the clients costs about
    # what half of them does (the device's fixed cost per batch dominates). The profile's arithmetic and the batch
    # sizes Triton reports do not move with the host: they are read with the fixed floor, not the run's drift
    exact = step.margin(interleaved=True)
    room = grade(emulated.two_devices_gain(emu_profile, top_c), margin=exact) is Grade.FLAT
    half = max(1, top_c // 2)
    step.answer(
        f"On the emulated device ({emu_profile.label}; an emulation, not a GPU measurement), {top_c} clients send "
        f"batches of about {top_c / 2:g}: t({half}) = {1000 * emu_profile.t_s(half):.0f} ms, "
        f"t({top_c}) = {1000 * emu_profile.t_s(top_c):.0f} ms. Two instances on one device should give "
        f"{inst_pred:.2f}× one ({'two groups at once, in the room the device has' if room else 'the device is full'}"
        f"); measured in alternating windows: {step.ratio(emu_instances[-1])}. "
        + (f"A second device would add nothing there: one batch of {top_c} costs "
           f"{emu_profile.t_s(top_c) / emu_profile.t_s(half):.2f}× one of {half}, so the first device has room. "
           if room else "")
        + f"On {flat.label}, full at {flat.full_at} images (t({flat.full_at}) = {1000 * flat.t_s(flat.full_at):.0f} ms, "
          f"t({full_c}) = {1000 * flat.t_s(full_c):.0f} ms), {full_c} clients and batches of {flat.full_at}: a second "
          f"instance should give {full_pred:.2f}× — its batch only queues for the same multiprocessors — measured: "
          f"{step.ratio(full_instances[-1])}; a second device should give {dev_pred:.2f}×, its whole capacity — "
          f"measured: {step.ratio(emu_devices[-1])}. On this CPU, {step.ratio(instance_ratio)}: "
          + {instance_ratio["a"]: "no idle compute was added, only the time one copy left a core idle outside "
                                  "compute (the answer above)",
             instance_ratio["b"]: "the second copy split cores the first already kept busy",
             None: "the cores were already busy, so there was no room to add"}[ahead] + ".")
    # the predictions take the clients' two groups as whole batches; what Triton ran says whether they stayed so
    avg = [float((r.get("server_stats") or {}).get("avg_batch") or 0)
           for r in (*emu_instances[:2], *full_instances[:2], *emu_devices[:2])]
    if all(avg):
        at_batches = [emulated.throughput_at(emu_profile, avg[0], 2) / emulated.throughput_at(emu_profile, avg[1]),
                      emulated.throughput_at(flat, avg[2], 2) / emulated.throughput_at(flat, avg[3]),
                      emulated.throughput_at(flat, avg[4], 2, 2) / emulated.throughput_at(flat, avg[5], 2)]
        broke = any(grade(got / group, margin=exact) is Grade.LOSS  # batches below the groups' size
                    for got, group in ((avg[0], top_c / 2), (avg[2], full_c / 2)))
        step.answer(
            "Those predictions take each group of clients as one batch. Triton reported batches of "
            f"{avg[0]:.1f} images on average with two instances against {avg[1]:.1f} with one on "
            f"{emu_profile.label} (groups of {top_c / 2:g}), and {avg[2]:.1f} against {avg[3]:.1f} on {flat.label} "
            f"(groups of {full_c / 2:g})"
            + (": with two instances free and no queue delay, a batch starts with whatever has arrived, so the "
               "groups break up." if broke else ": the groups stayed whole.")
            + f" At the batches that formed, the profiles allow {at_batches[0]:.2f}×, {at_batches[1]:.2f}× and "
            f"{at_batches[2]:.2f}× for the three comparisons (`throughput_at`: each instance always running a "
            "batch of that size): the measurement follows the batches, not the groups. Keeping batches whole in "
            "front of several instances is what a queue delay is for (notebook 05a).")
    side_by_side = pd.DataFrame([
        {"comparison": f"{instance_ratio['a']} ÷ {instance_ratio['b']}", "device": "this CPU", "concurrency": top_c,
         **ratio_columns(instance_ratio), "predicted": 1.0,
         "predicted_from": "both use every core once: nothing idle to add"},
        {"comparison": "2 instances ÷ 1 (one device with room)", "device": f"{emu_profile.label} (emulation)",
         "concurrency": top_c, **ratio_columns(emu_instances[-1]), "predicted": round(inst_pred, 2),
         "predicted_from": "the profile: (t(a) + t(b)) ÷ t(N)"},
        {"comparison": "2 instances ÷ 1 (one full device)", "device": f"{flat.label} (emulation)",
         "concurrency": full_c, **ratio_columns(full_instances[-1]), "predicted": round(full_pred, 2),
         "predicted_from": "the profile: (t(a) + t(b)) ÷ t(N)"},
        {"comparison": "2 devices ÷ 1 (two instances, full)", "device": f"{flat.label} (emulation)",
         "concurrency": full_c, **ratio_columns(emu_devices[-1]), "predicted": round(dev_pred, 2),
         "predicted_from": "the profile: t(N) ÷ max(t(a), t(b))"}])
    if all(avg):  # the emulated rows again, at the batches Triton ran
        side_by_side["at_measured_batches"] = [None, *at_batches]
    step.table(side_by_side.round(2), "scaling_cpu_vs_emulated",
               "Instances and devices, alternating windows: this CPU and the emulated accelerator (an emulation, "
               "not a GPU measurement)")

# %% [markdown]
# ## The multi-GPU half
# On a node with several GPUs, `docker/compose.06b-multi-gpu.yaml` runs Triton with every GPU: the staged
# instance group names no GPU, so `count` instances run on each. This notebook then measures it with
# `--place node`, `instance_counts` being instances per GPU.

# %%
show_commands("node", "SERVELAB_INSTANCES=2 docker compose -f docker/compose.00-prepare.yaml run --rm prepare"
              "   # 2 instances on every GPU Triton sees",
              "docker compose -f docker/compose.06b-multi-gpu.yaml up -d --build   # Triton with every GPU",
              "nvidia-smi dmon -s u     # both GPUs busy under load")
gpus_seen = len(triton.gpus or [])  # as the Triton server reports them, wherever this notebook runs
if gpus_seen < 2:
    step.not_run("multi-GPU scaling (one instance group per GPU)",
                 f"this {'node' if lab.place == 'node' else 'machine'}'s Triton reports {gpus_seen} GPU(s)",
                 f"instance-count scaling on {'one GPU' if gpus_seen else 'the CPU'} measured above")

# %% [markdown]
# ### Exercise: instances on a two-GPU node
# In `instance_group`, `count: N` without a `gpus` list means N instances on *every* visible GPU. Write the
# stanza that puts exactly two instances on each of GPUs 0 and 1, with the GPUs listed explicitly. The
# check parses it into Triton's `ModelConfig`.

# %% tags=["exercise"]
# Exercise 06b.2: write the instance_group for two GPUs
def two_gpu_instance_group(gpus, per_gpu):
    """config.pbtxt text: instance_group [ … ] with `per_gpu` KIND_GPU instances on each GPU in `gpus`."""
    # BEGIN SOLUTION
    groups = ", ".join(f"{{ kind: KIND_GPU count: {per_gpu} gpus: [ {g} ] }}" for g in gpus)
    return f"instance_group [ {groups} ]"
    # END SOLUTION


# %%
checks.gpu_instance_group(two_gpu_instance_group, gpus=[0, 1], per_gpu=2, exercise="06b.2", step=step)

# %% [markdown]
# ## Assignment: the most throughput within a p99 budget
# An open question, graded from the records. The product owner allows a p99 latency of three times what one
# client sees on its own (the budget below, from this run). Find the configuration that serves the most images
# per second within it: how many concurrent clients to admit, how many instances and threads each, spinning on
# or off, what queue delay (`preferred_batch_size` too, if you think it matters). `trials(concurrency=…,
# instances=…, threads=…, spinning=…, max_queue_delay_us=…, preferred_batch_size=…)` loads that configuration
# into Triton (the request you sent by hand above), measures it with that many batch-1 clients, writes a
# record, restores the model's config and returns `{"trial", "settings", "throughput_img_s", "latency_p99_ms",
# "errors"}`. Return the number of the trial you would deploy. The check reads the run's records: your trial
# must meet the budget, no other trial of yours may have met it with clearly more throughput, and it must not
# be clearly worse than one client on the default config. Your score is its throughput.
#
# **You have `trial_limit` trials**, each a reload and one measurement: enough to try what matters on a small
# machine (how many clients the budget admits, by Little's law: clients in flight ≈ throughput × latency; how
# the cores are split; whether a queue delay buys anything), too few to try every combination.

# %%
from servelab.assignments.live import Trials

one_client = points[(points["instances"] == min(instance_counts)) & (points["concurrency"] == min(concurrency_levels))]
budget_ms = round(3 * float(one_client["latency_p99_ms"].mean()))
trials = Trials(step.run, lab.triton_http_url, lab.triton_model, opts, "06b-p99-budget",
                kind="KIND_GPU" if lab.place == "node" else "KIND_CPU", max_trials=trial_limit)
top_rate = float(points[points["instances"] == min(instance_counts)]["throughput_img_s"].max())
print(f"p99 budget: {budget_ms} ms (3 × the p99 of {min(concurrency_levels)} client(s) on {min(instance_counts)} "
      f"instance(s)); at the sweep's best one-instance rate, {top_rate:.1f} img/s, that admits about "
      f"{top_rate * budget_ms / 1000:.1f} requests in flight; {trial_limit} trials")

# %% tags=["exercise"]
# Exercise 06b.3: meet the p99 budget at the highest throughput
def tune(trials, budget_ms):
    """Run the trials you choose (at most the budget's number); return the number of the one to deploy."""
    # BEGIN SOLUTION
    import os

    cores = os.cpu_count() or 1
    one = trials(concurrency=1)  # the default config: the floor any other choice has to beat
    two = trials(concurrency=2)  # both cores busy on one instance
    # Little's law: clients in flight ≈ throughput × latency; aim at about 70 % of the budget
    fit = max(2, min(8, int(0.7 * budget_ms / 1000 * two["throughput_img_s"])))
    tried = [one, two, trials(concurrency=fit), trials(concurrency=fit, instances=2, threads=max(1, cores // 2))]
    within = [t for t in tried if not t["errors"] and t["latency_p99_ms"] <= budget_ms]
    return max(within, key=lambda t: t["throughput_img_s"])["trial"] if within else one["trial"]
    # END SOLUTION


# %%
checks.p99_budget(tune, trials=trials, budget_ms=budget_ms, exercise="06b.3", step=step)

# %% [markdown]
# ## Compared with the source material
# - **Photo-dedup "Technical Deep-Dive", step 6B** (4× RTX 4080, client over the internet): one GPU 24.3 img/s,
#   four 43.2 img/s at concurrency 32, 1.8×, a **45 % efficiency**. Inside Triton a request took 17.9 ms (8.8 ms
#   queueing, 8.4 ms compute) while the client waited 416 ms: more GPUs shortened only what was not the
#   bottleneck. Per 1,000 images: $0.023 on one RTX 4080, $0.051 on four, $0.006 on one A100.
# - **Chameleon lab "System optimizations for serving"** (2× P100, python backend): two instances on each GPU
#   raised concurrency-8 throughput from 78.6 to 192.8 inferences/s; four on each *lowered* it to 118.7: past
#   the point where copies fill the GPU, they fight over it.
#
# This repository's own GPU reference (one H100) is in `reference/nvidia-h100-80gb-hbm3/`; it measured one GPU
# and no instance counts. `SOURCES.md` lists the write-ups and their hardware.

# %%
step.shows(
    f"At concurrency {top_c}, in alternating windows: {step.ratio(instance_ratio)}. In the sweep, "
    f"{n_hi} instances against {n_lo} gave a scaling efficiency of {eff:.2f} on "
    + (f"{len(triton.gpus)} GPU(s). " if triton.gpus else f"{step.environment.get('cpu_usable')} CPU cores. ")
    + (f"Multi-GPU scaling was not run: the node's Triton reports {gpus_seen} GPU(s). "
       if lab.place == "node" and gpus_seen < 2 else "")
    + f"Cost per 1,000 images at {price_per_hour} USD/hour ranged from {scaling[cost_col].min():.4f} to "
    f"{scaling[cost_col].max():.4f} USD over the points measured."
)
