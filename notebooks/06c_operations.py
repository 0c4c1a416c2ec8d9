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
# # 06c · Operations: past capacity, admission control and a monitoring view
#
# Stuck on an error? [When something goes wrong](../docs/TROUBLESHOOTING.md) has the messages and their fixes.
# How a measurement is read here (windows, drift, alternating windows, and when a lead is ranked): [How this lab reads a measurement](../docs/METHOD.md).
#
# **After this notebook you can**
# - offer a server more work than it can finish (open-loop arrivals) and read its overload knee: goodput and
#   the accepted requests' latency against the offered load;
# - read the lines of the service that refuse work past capacity, by count and by expected wait, before a
#   request's body is read;
# - say from a run's own counts where an overloaded server's work went;
# - watch a server through a real Prometheus (latency quantiles from a histogram, Triton's queue and compute
#   time, an alert) and say when each one lags or misleads.
#
# Notebooks 06a and 06b kept the offered load at or below what the servers finish. Operating a server means
# knowing what it does beyond that, and seeing it while it runs:
#
# ```mermaid
# flowchart LR
#   A[open-loop arrivals<br/>a multiple of capacity] --> G{admission gate<br/>requests in flight<br/>expected wait}
#   G -- past a bound --> R[503 + Retry-After<br/>body never read]
#   G -- admitted --> D[read + decode] --> Q[(batcher queue)] --> E[ONNX Runtime]
#   Q -- waited past the budget --> X[503<br/>never computed]
#   M[service /metrics<br/>Triton /metrics] --> P[(Prometheus<br/>scrapes on a timer)] --> V[PromQL view<br/>and an alert]
# ```

# %% tags=["parameters"]
harness = {}              # where this runs: filled by `servelab lab run` ({}: this place's defaults)
monitor_step_s = 2.0     # seconds per step of the monitoring view's stepped load (a quick run takes 0.5)

# %%
from servelab.lab.session import session

lab = session("06c", globals())  # endpoints, model names, results folder and load profile of this run

# %%
from servelab.bench.servers import served
from servelab.lab.step import show_code

step = lab.step
opts = lab.load

# %% [markdown]
# ## Past capacity: the overload knee
# Real traffic does not ask first. Here the clients are **open loop**: requests arrive at a fixed average rate
# (Poisson) whether or not earlier ones were answered, at one, two and eight times the service's measured
# capacity (`levels` below), from a load generator on cores of its own. Two copies of the servelab service take the same arrivals:
#
# - **with admission control**: past its in-flight limit or its wait budget (`SERVELAB_MAX_WAIT_MS`) it answers
#   `503` with `Retry-After` *before reading the body*, and a request that waited past the budget before the
#   engine took it is dropped instead of computed;
# - **without**: every body is read and decoded first, and only then refused if the batcher's queue is full.
#
# *Goodput* is what matters to users: images per second answered 200. Latency counts from each request's
# scheduled arrival, so waiting anywhere counts.
#
# ### The gate, in the service's code
# Every embedding request passes the `Gate`, a plain
# ASGI middleware in front of FastAPI: before the body is read it asks why a request arriving now would be
# refused, answers 503 at once when there is a reason, and otherwise holds a slot until the answer is done. The
# gate has two bounds: a count of requests in flight, and an expected wait (the images ahead at the engine's
# recent pace) against the wait budget; the first few requests in flight are taken whatever their wait, unless it
# has just refused one. That estimate is also the `Retry-After` a refused client is told.

# %%
from servelab.service.admission import Admission
from servelab.service.gate import Gate

show_code(Gate.__call__)
show_code(Admission.refusal)
show_code(Admission.within_count)
show_code(Admission.expected_wait_s)

# %% [markdown]
# **Predict first.** At eight times capacity, what happens to goodput and to the p99 latency of the
# *accepted* requests, with and without admission control? Does refusing requests lower goodput or raise it?

# %%
import pandas as pd

from servelab.bench.experiments.overload import knee_rows, overload, plot_knee

overload_engine = overload.__kwdefaults__["engine"]  # what `servelab bench overload` serves, so both agree
knee = None
if step.skip_unless(lab.extra_servers, "overload knee", "extra_servers=False (smoke profile)",  # two services, 1.5 min
                    "`servelab bench overload` measures it, with LitServe and Triton alongside"):
    overload_recs = overload(step.run, servers=("fastapi", "fastapi-no-admission"), engine=overload_engine,
                             levels=(1, 2, 8), duration_s=4.0, queue=32, quick=opts.quick)
    knee = step.table(pd.DataFrame(knee_rows(overload_recs)), "overload_knee",
                      "Goodput and accepted latency past capacity, with and without admission control")
    step.show_plot(plot_knee(overload_recs, step.plot_path("overload_knee")))

# %%
def _at(server, level):
    return knee[(knee["server"] == server) & (knee["level"] == level)].iloc[0]


if knee is not None:
    top = int(knee["level"].max())
    on1, on_top = _at("fastapi", 1), _at("fastapi", top)
    off1, off_top = _at("fastapi-no-admission", 1), _at("fastapi-no-admission", top)
    gate = next((r["params"] for r in overload_recs if r["server"] == "fastapi" and r.get("kind") == "load"
                 and r["params"].get("admission_control") and r["params"].get("level") == top), {})  # its limits at top
    step.answer(
        f"Both copies served the `{overload_engine}` engine (the benchmark's, `servelab bench overload`). "
        f"With admission control, goodput went from {on1['goodput_img_s']:.1f} img/s at capacity to "
        f"{on_top['goodput_img_s']:.1f} img/s at {top}× "
        f"({100 * on_top['goodput_img_s'] / max(on1['goodput_img_s'], 1e-9):.0f} %), refusing "
        f"{int(on_top['shed_503'])} requests with 503, and the accepted p99 was {on_top['accepted_p99_ms'] / 1000:.1f} s "
        f"(a full queue drains in {on_top['drain_s']:.1f} s; the gate let in up to {gate.get('max_in_flight')} requests, "
        f"the first {gate.get('always_admit')} whatever their expected wait, against a wait budget of "
        f"{gate.get('max_wait_ms') or 0:.0f} ms). Without it, goodput went from "
        f"{off1['goodput_img_s']:.1f} to {off_top['goodput_img_s']:.1f} img/s "
        f"({100 * off_top['goodput_img_s'] / max(off1['goodput_img_s'], 1e-9):.0f} %) with an accepted p99 of "
        f"{off_top['accepted_p99_ms'] / 1000:.1f} s, {int(off_top['shed_503'])} refused only after being decoded and "
        f"{int(off_top['no_answer'])} never answered in time. Goodput is counted over a few seconds per level, so "
        "compare the two servers' trends, not single points that differ by less than a batch."
    )

# %% [markdown]
# ### What shedding early costs and buys
# A server past capacity fails some requests whatever it does; what it chooses is *which*, and what each
# failure costs:
#
# - **With the gate**, a refused request costs a connection, a parsed header and a short answer. An accepted
#   one's wait is bounded by the requests let in (Little's law: requests inside ÷ throughput). But every refusal still
#   takes the event loop's time on the server's cores, and a gate that refuses while the engine could still
#   take work leaves the engine less to do.
# - **Without it**, every request is read and decoded before it can be turned away, on the cores the engine
#   needs. The engine always has work, but each accepted request waits behind a full queue, and an answer that
#   arrives after its client gave up was computed for nobody.
#
# Which weighs more depends on the machine; the cell below reads it from this run's records.
# Triton sheds the same way with `max_queue_size` in its queue policy (the benchmark turns it on; notebook 04
# says why the lab's config leaves it off); LitServe has no bound. `servelab bench overload` measures all four.

# %%
from servelab.bench.report import Grade, grade, words


def _rec(server, level):
    return next(r for r in overload_recs if r["experiment"] == "overload" and r.get("kind") == "load"
                and r["server"] == server and r["params"].get("phase") == "open-loop" and r["params"]["level"] == level)


def held(server):
    """This copy's goodput at the top level against its own at capacity, graded with this run's margin."""
    ref, r = _rec(server, 1), _rec(server, top)
    ratio = max(r["goodput_img_s"], 1e-9) / max(ref["goodput_img_s"], 1e-9)
    lo = (r.get("throughput_min_img_s") or r["goodput_img_s"]) / max(ref.get("throughput_max_img_s") or ref["goodput_img_s"], 1e-9)
    hi = (r.get("throughput_max_img_s") or r["goodput_img_s"]) / max(ref.get("throughput_min_img_s") or ref["goodput_img_s"], 1e-9)
    if False in (r.get("stable"), ref.get("stable")):  # a band that never settled reaches 1 whatever the ratio
        return (f"{server} kept {100 * ratio:.0f} % of its goodput at capacity (not graded: its windows never "
                f"settled, {r.get('throughput_min_img_s') or 0:.1f}–{r.get('throughput_max_img_s') or 0:.1f} img/s)")
    return f"{server} kept {100 * ratio:.0f} % of its goodput at capacity ({words(grade(ratio, lo, hi, margin=step.margin()))})"


def went(server):
    """Where the requests sent at the top level went, from the client's tally and the service's own counters."""
    r = _rec(server, top)
    tally, stats = r.get("outcomes_total") or {}, r.get("server_stats") or {}
    rejected = stats.get("rejections") or {}
    return (f"{server} was sent {sum(tally.values())} requests: {tally.get('ok', 0)} answered 200, "
            f"{rejected.get('overloaded', 0)} refused at the door, {rejected.get('deadline_exceeded', 0)} dropped "
            f"after waiting past their bound, {rejected.get('queue_full', 0)} refused after being read and decoded, "
            f"{tally.get('no_answer', 0)} never answered in time; its engine computed {stats.get('images', 0)} images "
            f"in batches of {stats.get('avg_batch') or 0:.1f} on average")


if knee is not None:
    on, off = _rec("fastapi", top), _rec("fastapi-no-admission", top)
    goodput_said = step.versus("fastapi", on, "fastapi-no-admission", off)
    p99_said = step.versus("fastapi", on, "fastapi-no-admission", off, metric="latency_p99_ms", unit="ms", digits=0)
    work_on, work_off = ((r.get("server_stats") or {}).get("images") or 0 for r in (on, off))
    engine = grade(max(work_on, 1) / max(work_off, 1), margin=step.margin())
    limits = on["params"]
    why = {Grade.LOSS: "the gate kept work from an engine that could still have done it: it refused once "
                       f"{limits.get('max_in_flight')} requests were inside or a new one's expected wait passed the "
                       f"{limits.get('max_wait_ms') or 0:g} ms budget, and the engine, fed fewer requests, computed fewer "
                       "images; the accepted requests' wait is what that bought",
           Grade.GAIN: "without the gate, reading and decoding the requests it would refuse took the cores from "
                       "the engine, which computed fewer images, some for clients that had already given up",
           Grade.FLAT: f"the engine computed {work_on} images with the gate and {work_off} without (totals over each "
                       f"copy's whole run; goodput is the windows' rate), a difference within this run's "
                       f"{100 * step.margin():.0f} % margin for figures measured apart: this run cannot say the gate changed "
                       "how much the engine did, only which requests it computed and how long they waited"}[engine]
    step.answer(f"At {top}× capacity: {goodput_said} (goodput); {p99_said} (accepted p99). "
                f"{held('fastapi')}; {held('fastapi-no-admission')}. {went('fastapi')}. {went('fastapi-no-admission')}. "
                f"So, in this run, {why}.")
# %% [markdown]
# ## Watching it happen: a monitoring view
# The overload tables were written after the fact by the load generator. An operator sees a server while it
# runs, through its metrics: the service and Triton publish Prometheus counters and histograms at `/metrics`,
# and a **Prometheus** server scrapes them on a timer, stores the series and answers PromQL queries. Here a real
# Prometheus (on a free loopback port) scrapes both every 0.5 s
# while a **stepped load** of 1, 2, 3, 5, 3, 2 and 1 clients, a couple of seconds per step, goes to the
# service and to Triton at once (on the same cores). The service here admits 4 requests at a time, so at 5
# clients it must refuse some; one alert rule watches for that.
#
# The queries read:
# - the service's latency quantiles with `histogram_quantile` over its `servelab_request_latency_seconds`
#   histogram (rates of the bucket counters over a short window);
# - its answers per second by status, from `servelab_requests_total`;
# - Triton's queue and compute time per request: its cumulative microsecond counters
#   `nv_inference_queue_duration_us` and `nv_inference_compute_infer_duration_us`, each rate divided by the
#   rate of `nv_inference_request_success`.
#
# First, Triton's `/metrics` read by hand: plain text, one line per counter and model. These counters only
# grow, so what they say is an average since the server started.

# %%
import urllib.error
import urllib.request

counters = ("nv_inference_request_success", "nv_inference_queue_duration_us", "nv_inference_compute_infer_duration_us")
try:
    metrics_text = urllib.request.urlopen(lab.triton_metrics_url, timeout=5).read().decode()
except (urllib.error.URLError, OSError) as exc:
    step.not_run("Triton's /metrics read by hand", f"{lab.triton_metrics_url} did not answer ({exc})")
else:
    lines = [ln for ln in metrics_text.splitlines() if ln.startswith(counters) and f'model="{lab.triton_model}"' in ln]
    print("\n".join(lines))
    total = {name: sum(float(ln.rsplit(" ", 1)[1]) for ln in lines if ln.startswith(name + "{")) for name in counters}
    if total["nv_inference_request_success"]:
        n = total["nv_inference_request_success"]
        step.answer(f"Since Triton started, {lab.triton_model} answered {n:.0f} requests; on average each waited "
                    f"{total['nv_inference_queue_duration_us'] / n / 1000:.1f} ms in the queue and computed for "
                    f"{total['nv_inference_compute_infer_duration_us'] / n / 1000:.1f} ms. Averages since start hide the "
                    "present: the view below takes the rate of each counter over a short window instead.")

# %% [markdown]
# **Predict first.** At 5 clients, requests the gate cannot admit get instant 503s. What will the p50
# from `histogram_quantile` do during that step — rise, stay, or fall? And will the alert start at the first
# 503 and stop at the last, or later, and by about how much?

# %%
import contextlib

from servelab.assignments import checks
from servelab.bench.experiments.monitoring import STEPS, Target, monitoring, plot_monitoring
from servelab.bench.load import client_factory
from servelab.bench.load.inputs import sample_jpegs
from servelab.client import InferenceClient

triton_jpeg = lab.attach("triton-http", payload="jpeg", jpeg_model=lab.triton_jpeg_model)  # the run's Triton, JPEGs
step_s = min(monitor_step_s, 0.5) if opts.quick else monitor_step_s
interval_s = 0.5  # Prometheus scrapes (and evaluates the rule) every 0.5 s: four times per 2 s step
prometheus_up = contextlib.ExitStack()  # Prometheus, up until the exercise below is checked (or the kernel exits)
with contextlib.ExitStack() as stack:  # the monitored service, stopped at the end of this cell
    if lab.extra_servers:  # a service that admits 4 at a time, on the engine the overload section used
        svc = stack.enter_context(served("fastapi", overload_engine, payload="jpeg", max_queue=32,
                                         env={"SERVELAB_MAX_IN_FLIGHT": 4, "SERVELAB_REQUEST_TIMEOUT_S": 10},
                                         log_path=step.out_dir / "logs" / "monitored-service.log"))
        monitored_url, admits = svc.url, 4
    else:  # a quick run starts no extra server: the run's own service, whose limit is far above 5 clients
        monitored_url, admits = lab.service_url, None
    jpegs = list(sample_jpegs(1))
    view = prometheus_up.enter_context(monitoring(
        [Target("servelab", monitored_url + "/metrics"), Target("triton", lab.triton_metrics_url)],
        {"servelab": client_factory(lambda: InferenceClient(mode="remote", backend="fastapi", url=monitored_url,
                                                            payload="jpeg", retries=0), blobs=jpegs),
         "triton": client_factory(triton_jpeg.make_client, blobs=jpegs)},
        triton_model=lab.triton_model, steps=STEPS, step_s=step_s, interval_s=interval_s,
        log_path=step.out_dir / "logs" / "prometheus.log"))
print(view.prometheus if view.scraped else f"{view.prometheus}: the stepped load below comes from servelab's "
      "own records only")
if view.scraped:  # what was asked of Prometheus, and the rule it evaluated
    print("\n".join(f"{name:>17}: {q}" for name, q in view.queries.items()) + "\n\n" + view.rules)
if admits is None:
    step.not_run("shedding under the stepped load", "a quick run uses the run's own service, which admits far more "
                 "than 5 requests", "the same view without 503s; the default profile starts a service admitting 4")
steps_table = step.table(pd.DataFrame(view.steps), "monitoring_steps",
                         "The stepped load from servelab's own records: per server and step, answers/s and the "
                         "accepted requests' latency")
step.show_plot(plot_monitoring(view, step.plot_path("monitoring")))

# %%
def _own(target, clients):
    rows = [r for r in view.steps if r["target"] == target and r["clients"] == clients]
    return rows[-1] if rows else {}


def _ms(x):
    return "no value" if x is None or x != x else f"{x:.0f} ms"  # None or NaN: no answer in that step


top_clients = max(STEPS)
one, five = _own("servelab", 1), _own("servelab", top_clients)
parts = [f"In servelab's own records, at 1 client the service answered {one.get('ok_rps', 0):.1f} req/s (accepted "
         f"p99 {_ms(one.get('accepted_p99_ms'))}); at {top_clients} clients {five.get('ok_rps', 0):.1f} req/s "
         f"answered 200 and {five.get('shed_rps', 0):.1f} req/s were refused with 503 (accepted p99 "
         f"{_ms(five.get('accepted_p99_ms'))})"]
if view.scraped:
    p50_1, p50_5 = view.during("p50_ms", 1), view.during("p50_ms", top_clients)
    parts.append(f"Prometheus's histogram_quantile gave a p50 of {_ms(p50_1)} at 1 client and {_ms(p50_5)} at "
                 f"{top_clients} (p99 {_ms(view.during('p99_ms', top_clients))})"
                 + (": the p50 fell because the histogram counts the instant refusals with the answers"
                    if view.shed_span and p50_1 is not None and p50_5 is not None and p50_5 < p50_1 else ""))
    q1, q5 = view.during("triton_queue_ms", 1), view.during("triton_queue_ms", top_clients)
    c5 = view.during("triton_compute_ms", top_clients)
    if None not in (q1, q5, c5):
        parts.append(f"Triton's queue time per request went from {q1:.0f} ms at 1 client to {q5:.0f} ms at "
                     f"{top_clients}, beside {c5:.0f} ms of compute per request"
                     + (": past what the cores finish, the extra clients wait in its queue" if q5 > q1 else ""))
    if view.shed_span and view.alert_firing:
        (a, b), (s0, s1) = (view.alert_firing[0][0], view.alert_firing[-1][1]), view.shed_span
        parts.append(f"the first 503 left the service {s0:.1f} s into the load and the last at {s1:.1f} s; the "
                     f"alert fired from {a:.1f} s to {b:.1f} s, {a - s0:.1f} s after the first refusal and "
                     f"{b - s1:.1f} s past the last. Expected from the settings: a lag of up to "
                     f"{3 * view.interval_s:g} s (the 503 series appears at the next scrape, rate() needs a second "
                     f"one, the rule runs on its own {view.interval_s:g} s timer) and a linger of about the "
                     f"{view.window_s:g} s rate window")
    elif view.shed_span:
        parts.append("the service shed, but the alert never fired: the refusals were over before two scrapes "
                     "had seen them")
    else:
        parts.append("the service never shed, so the alert stayed silent")
step.answer("; ".join(parts) + ".")

# %% [markdown]
# ### Exercise: ask Prometheus yourself
# Prometheus still holds the load's series. Write the PromQL for the service's answers per second on `/embed`,
# one series per `status`, over the last `window` (the check picks it), compared with the load generator's own
# records.

# %% tags=["exercise"]
# Exercise 06c.1: the service's answers per second by status, in PromQL
def answers_per_second(window):
    """A PromQL expression: the monitored service's answers per second on /embed over the last `window`, one
    series per `status` label (from its counter servelab_requests_total)."""
    # BEGIN SOLUTION
    return f'sum by (status) (rate(servelab_requests_total{{endpoint="/embed"}}[{window}]))'
    # END SOLUTION


# %%
checks.promql_rates(answers_per_second, prometheus_url=view.prometheus_url, start=view.started, end=view.ended,
                    counts=view.outcomes.get("servelab", {}), unavailable=view.prometheus, exercise="06c.1", step=step)

# %%
prometheus_up.close()  # Prometheus stops here

# %% [markdown]
# ### Why the monitoring view looks the way it does
# - **`histogram_quantile` estimates.** Prometheus sees only how many requests fell into each bucket (bounds in
#   `servelab/service/metrics.py`) and interpolates linearly inside one: a p99 is only as sharp as its bucket.
#   Compare the lines with the dots of servelab's own records.
# - **It counts what the histogram counts.** The service records every answer of an embedding route in one
#   histogram, refusals included. When most answers are millisecond 503s, the median answer *is* a 503: the
#   p50 falls just as the service is in trouble. Watch the answers by status beside it, or keep accepted and
#   refused latencies apart (a `status` label) before putting a latency SLO on a dashboard.
# - **An alert is late by construction.** A series that appears with the first 503 needs two scrapes before
#   `rate()` has a value, the rule runs on its own timer, and the rate window keeps it firing until the last
#   refusal has slid out. Lag ≈ one or two scrape intervals plus an evaluation; linger ≈ the window.
#   Production rules add `for: 1m` so that a blip pages no one; here `for: 0s` shows the mechanism.
# - **Refused clients come straight back.** The load generator resends at once, ignoring `Retry-After`, so a
#   couple of clients over the limit make many refusals per second.

# %% [markdown]
# ## Compared with the source material
# - **Chameleon lab "System optimizations for serving"** (P100, its Food-11 classifier, Triton's python
#   backend): past capacity in a *closed* loop, extra clients only wait. At concurrency 8 and at 16 Triton
#   delivered the same 52.4 inferences/s, while the queue time grew from 132 ms to 283 ms of each request.
#   A closed loop cannot overload a server; the open loop here can, which is why it needs a gate.
#
# This repository's own GPU reference (one H100, `reference/nvidia-h100-80gb-hbm3/`) has no overload run:
# `servelab bench overload` on the node measures the same knee there (`SOURCES.md` lists the write-ups).

# %%
parts = []
if knee is not None:
    parts.append(f"At {top}× capacity, goodput: {goodput_said}; accepted p99: {p99_said}. {held('fastapi')}; "
                 f"{held('fastapi-no-admission')}. In this run, {why}.")
parts.append(f"Under the stepped load, at {top_clients} clients the monitored service answered "
             f"{five.get('ok_rps', 0):.1f} req/s with 200 and refused {five.get('shed_rps', 0):.1f} req/s with 503"
             + (" (it admits far more than that many clients: none were refused)" if admits is None else ""))
if view.scraped and view.shed_span and view.alert_firing:
    parts[-1] += (f"; the shedding alert fired {view.alert_firing[0][0] - view.shed_span[0]:.1f} s after the first "
                  f"refusal and stopped {view.alert_firing[-1][1] - view.shed_span[1]:.1f} s after the last")
elif not view.scraped:
    parts[-1] += f"; no Prometheus view ({view.prometheus})"
step.shows(f"{' '.join(parts)}.")
