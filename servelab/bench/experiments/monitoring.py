"""A monitoring view under load: a real Prometheus server scrapes the service and Triton while a stepped
closed-loop load (1, 2, 3, 5, 3, 2, 1 clients) runs, and the view is read back with PromQL.

    targets = [Target("servelab", service_url + "/metrics"), Target("triton", triton_metrics_url)]
    view = monitor(targets, {"servelab": service_factory, "triton": triton_factory}, triton_model="m")
    view.series["p99_ms"]        # (t_s, value) from histogram_quantile over the service's histogram
    view.alert_firing            # [(start_s, end_s)] while the ServiceShedsLoad alert fired
    plot_monitoring(view, path)

    with monitoring(targets, factories, triton_model="m") as view:   # Prometheus still up inside the block
        httpx.get(view.prometheus_url + "/api/v1/query", params={"query": "up"})   # PromQL about the load just run

Prometheus is Debian's `prometheus` package (`scripts/prometheus.sh`) or the official binary on PATH. It runs as
a `ManagedProcess` (own process group, stopped with its whole group) on a free loopback port with a
temporary data directory, a short scrape and rule-evaluation interval, and one alert rule (`rules_yaml`).
Where it cannot be started, `monitor` still runs the load and returns servelab's own per-request records
(`view.steps`), with `view.prometheus` saying why there is no Prometheus view.

The service's latency histogram counts every answer of an embedding route, the instant 503 refusals too;
the load generator's own per-step percentiles (`steps`) count accepted requests only. Both are shown, and
the difference is part of the lesson.
"""

from __future__ import annotations

import atexit
import contextlib
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from servelab.errors import InvalidValue
from servelab.managed_process import ManagedProcess
from servelab.netutil import free_port

STEPS = (1, 2, 3, 5, 3, 2, 1)  # clients per step: up past the service's admission limit and back down
ALERT = "ServiceShedsLoad"
QUANTILES = (0.5, 0.95, 0.99)


@dataclass(frozen=True)
class Target:
    """One scrape job: its name (the `job` label) and its metrics URL."""

    job: str
    metrics_url: str

    @property
    def address(self) -> str:
        return self.metrics_url.split("://", 1)[-1].split("/", 1)[0]

    @property
    def path(self) -> str:
        rest = self.metrics_url.split("://", 1)[-1]
        return "/" + rest.split("/", 1)[1] if "/" in rest else "/metrics"


# --- configuration: what Prometheus scrapes and when it alerts ------------------------------------------------

def alert_expr(window_s: float = 2.0) -> str:
    """The alert's PromQL: the service answered 503 (shed load) at some rate over the last `window_s`."""
    return f'sum(rate(servelab_requests_total{{status="503"}}[{_dur(window_s)}])) > 0'


def rules_yaml(window_s: float = 2.0) -> str:
    """One alerting rule: firing while the service sheds load. `for: 0s` — on the first evaluation that sees 503s;
    a production rule waits longer (`for: 1m`) so that a blip does not page anyone."""
    return (
        "groups:\n"
        "  - name: servelab\n"
        "    rules:\n"
        f"      - alert: {ALERT}\n"
        f"        expr: '{alert_expr(window_s)}'\n"
        "        for: 0s\n"
        "        labels:\n"
        "          severity: warning\n"
        "        annotations:\n"
        "          summary: 'the service is refusing requests with 503 (past its in-flight limit)'\n"
    )


def config_yaml(targets: Sequence[Target], rules_file: Path, interval_s: float = 0.5) -> str:
    """A Prometheus configuration: every target scraped (and the rules evaluated) every `interval_s`."""
    lines = ["global:", f"  scrape_interval: {_dur(interval_s)}", f"  scrape_timeout: {_dur(interval_s)}",
             f"  evaluation_interval: {_dur(interval_s)}", "rule_files:", f"  - '{rules_file}'", "scrape_configs:"]
    for t in targets:
        lines += [f"  - job_name: '{t.job}'", f"    metrics_path: '{t.path}'",
                  "    static_configs:", f"      - targets: ['{t.address}']"]
    return "\n".join(lines) + "\n"


def _dur(seconds: float) -> str:
    return f"{int(round(seconds * 1000))}ms"


# --- the queries the view is drawn from -------------------------------------------------------------------------

def queries(triton_model: str | None, window_s: float = 2.0, endpoint: str = "/embed") -> dict[str, str]:
    """name -> PromQL. Latency quantiles in ms from the service's histogram; answers/s by status; Triton's queue
    and compute time per request in ms (its cumulative microsecond counters ÷ its request counter)."""
    w = _dur(window_s)
    q = {f"p{int(round(100 * x))}_ms":
         f'1000 * histogram_quantile({x}, sum by (le) (rate(servelab_request_latency_seconds_bucket'
         f'{{endpoint="{endpoint}"}}[{w}])))' for x in QUANTILES}
    q["ok_rps"] = f'sum(rate(servelab_requests_total{{endpoint="{endpoint}",status="200"}}[{w}]))'
    q["shed_rps"] = f'sum(rate(servelab_requests_total{{endpoint="{endpoint}",status="503"}}[{w}]))'
    q["alert"] = f'ALERTS{{alertname="{ALERT}",alertstate="firing"}}'
    if triton_model:
        m = f'{{model="{triton_model}"}}'
        for name, metric in (("triton_queue_ms", "nv_inference_queue_duration_us"),
                             ("triton_compute_ms", "nv_inference_compute_infer_duration_us")):
            q[name] = f"sum(rate({metric}{m}[{w}])) / sum(rate(nv_inference_request_success{m}[{w}])) / 1000"
    return q


# --- the server ---------------------------------------------------------------------------------------------

def prometheus_binary() -> str | None:
    return shutil.which("prometheus")


def promtool_binary() -> str | None:
    return shutil.which("promtool")


def check_rules(path: Path) -> str:
    """`promtool check rules` on a rules file: its output; raises ValueError with promtool's reason if refused."""
    tool = promtool_binary()
    if tool is None:
        raise FileNotFoundError("promtool is not on PATH (bash scripts/prometheus.sh installs it)")
    res = subprocess.run([tool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    if res.returncode != 0:
        raise InvalidValue(f"promtool refused {path}: {(res.stdout + res.stderr).strip()}")
    return res.stdout.strip()


class PrometheusServer(ManagedProcess):
    """`with PrometheusServer(targets) as prom: prom.url` — a Prometheus on a free loopback port, its data in a
    temporary directory removed on stop."""

    name = "prometheus"

    def __init__(self, targets: Sequence[Target], *, interval_s: float = 0.5, window_s: float = 2.0,
                 binary: str | None = None, port: int | None = None, **kw):
        kw.setdefault("startup_timeout", 30.0)
        super().__init__(**kw)
        self.binary = binary or prometheus_binary()
        if self.binary is None:
            raise FileNotFoundError("no prometheus binary on PATH (bash scripts/prometheus.sh installs Debian's)")
        self.port = port or free_port(self.host)
        self.dir = Path(tempfile.mkdtemp(prefix="servelab-prometheus-"))
        self.rules_file = self.dir / "rules.yml"
        self.rules_file.write_text(rules_yaml(window_s))
        self.config_file = self.dir / "prometheus.yml"
        self.config_file.write_text(config_yaml(targets, self.rules_file, interval_s))

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def ready_url(self) -> str:
        return self.url + "/-/ready"

    def command(self) -> list[str]:
        return [self.binary, f"--config.file={self.config_file}", f"--storage.tsdb.path={self.dir / 'data'}",
                f"--web.listen-address={self.host}:{self.port}", "--storage.tsdb.retention.time=1h"]

    def ports(self) -> dict[str, tuple[int, str]]:
        return {"Prometheus": (self.port, "port=")}

    def fatal_in_log(self, log_text: str) -> str | None:
        for line in log_text.splitlines():
            if "level=error" in line and ("err=" in line or "msg=" in line):
                return line.strip()[-300:]
        return None

    def start(self):
        super().start()
        atexit.register(self.stop)  # held across notebook cells: a kernel that exits midway still stops it
        return self

    def stop(self) -> int | None:
        atexit.unregister(self.stop)
        try:
            return super().stop()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    # --- reading it back ---
    def query(self, promql: str) -> list[dict]:
        return self._api("query", {"query": promql})

    def query_range(self, promql: str, start: float, end: float, step_s: float) -> list[dict]:
        return self._api("query_range", {"query": promql, "start": start, "end": end, "step": step_s})

    def _api(self, what: str, params: dict) -> list[dict]:
        import httpx

        r = httpx.get(f"{self.url}/api/v1/{what}", params=params, timeout=10.0)
        body = r.json()
        if body.get("status") != "success":
            raise InvalidValue(f"Prometheus refused {params.get('query')!r}: {body.get('error', r.text)}")
        return body["data"]["result"]

    def targets_up(self) -> dict[str, bool]:
        return {s["metric"].get("job", "?"): s["value"][1] == "1" for s in self.query("up")}

    def wait_scraped(self, jobs: Sequence[str], timeout: float = 10.0) -> bool:
        """Until every job has been scraped successfully once."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                up = self.targets_up()
                if all(up.get(j) for j in jobs):
                    return True
            time.sleep(0.2)
        return False


# --- the stepped load ---------------------------------------------------------------------------------------

@dataclass
class Request:
    """One request of the stepped load: which target, when (unix seconds), its outcome."""

    job: str
    clients: int
    t_start: float
    t_end: float
    outcome: str  # ok | shed | http_5xx | http_4xx | no_answer (servelab.bench.experiments.overload.outcome)


def stepped_load(factories: dict[str, Callable[[int], tuple]], steps: Sequence[int] = STEPS,
                 step_s: float = 2.0) -> tuple[float, list[Request]]:
    """Closed-loop clients, `steps[k]` of them per target during step k (`step_s` each), every target at once.

    `factories[job](i)` gives worker i its (work, close), as `servelab.bench.load.client_factory` makes them.
    Returns the start time (unix seconds) and every request. Workers beyond the current step's count idle; a
    request under way when its worker is retired finishes and counts in the step it started in.
    """
    from servelab.bench.experiments.overload import outcome

    most = max(steps)
    state = {"clients": 0, "stop": False}
    done: list[Request] = []
    lock = threading.Lock()

    def worker(job: str, i: int):
        work, close = _split(factories[job](i))
        try:
            while not state["stop"]:
                clients = state["clients"]
                if i >= clients:
                    time.sleep(0.01)
                    continue
                t0, exc = time.time(), None
                try:
                    work()
                except Exception as e:  # noqa: BLE001 - every failure is an outcome to count
                    exc = e
                with lock:
                    done.append(Request(job, clients, t0, time.time(), outcome(exc)))
        finally:
            if close:
                close()

    threads = [threading.Thread(target=worker, args=(job, i), daemon=True, name=f"step-{job}-{i}")
               for job in factories for i in range(most)]
    for t in threads:
        t.start()
    t_start = time.time()
    try:
        for k, n in enumerate(steps):
            state["clients"] = n
            time.sleep(max(0.0, t_start + (k + 1) * step_s - time.time()))
    finally:
        state["stop"] = True
        for t in threads:
            t.join(timeout=60)
    return t_start, sorted(done, key=lambda r: r.t_start)


def _split(made):
    return made if isinstance(made, tuple) else (made, None)


def step_rows(t_start: float, requests: list[Request], steps: Sequence[int], step_s: float) -> list[dict]:
    """servelab's own records per target and step: clients, answers/s by outcome, accepted p50/p95/p99 (ms)."""
    rows = []
    for job in dict.fromkeys(r.job for r in requests):
        for k, n in enumerate(steps):
            lo, hi = t_start + k * step_s, t_start + (k + 1) * step_s
            rs = [r for r in requests if r.job == job and lo <= r.t_start < hi]
            ok = np.array([1000 * (r.t_end - r.t_start) for r in rs if r.outcome == "ok"])
            row = {"target": job, "step": k + 1, "clients": n, "t_s": round(k * step_s, 2),
                   "ok_rps": round(len(ok) / step_s, 2),
                   "shed_rps": round(sum(r.outcome == "shed" for r in rs) / step_s, 2),
                   "failed": sum(r.outcome not in ("ok", "shed") for r in rs)}
            for x in QUANTILES:
                row[f"accepted_p{int(round(100 * x))}_ms"] = round(float(np.percentile(ok, 100 * x)), 1) if len(ok) else None
            rows.append(row)
    return rows


# --- the whole view -----------------------------------------------------------------------------------------

@dataclass
class MonitoringView:
    """What one stepped load showed: servelab's own per-step records and, where Prometheus ran, its series."""

    steps: list[dict]  # step_rows
    step_s: float
    clients: tuple  # clients per step
    prometheus: str  # "Prometheus <version> scraping every … " or why there was none
    queries: dict[str, str] = field(default_factory=dict)  # name -> PromQL
    series: dict[str, tuple] = field(default_factory=dict)  # name -> (t_s from the load's start, values)
    alert_firing: list[tuple] = field(default_factory=list)  # [(start_s, end_s)] of the ALERT
    interval_s: float = 0.5
    window_s: float = 2.0  # the rate window of every query and of the alert
    rules: str = ""  # the rules file Prometheus evaluated
    shed_span: tuple | None = None  # (first, last) 503 answer of the service, s from the load's start (servelab records)
    started: float = 0.0  # the load's start and end, unix seconds
    ended: float = 0.0
    outcomes: dict = field(default_factory=dict)  # outcome_counts: {target: {outcome: requests}} during the load
    prometheus_url: str | None = None  # inside `monitoring`'s block only, where Prometheus ran and scraped

    @property
    def scraped(self) -> bool:
        return bool(self.series)

    def peak(self, name: str) -> float | None:
        t, v = self.series.get(name, ((), ()))
        v = np.asarray(v, dtype=float)
        v = v[np.isfinite(v)]
        return float(v.max()) if len(v) else None

    def during(self, name: str, clients: int) -> float | None:
        """Median of a series over the steps with `clients` clients (None where it has no finite value there)."""
        t, v = self.series.get(name, ((), ()))
        t, v = np.asarray(t, dtype=float), np.asarray(v, dtype=float)
        mask = np.zeros(len(t), dtype=bool)
        for k, n in enumerate(self.clients):
            if n == clients:  # the second half of the step: the rate window has filled by then
                mask |= (t >= (k + 0.5) * self.step_s) & (t < (k + 1) * self.step_s)
        v = v[mask & np.isfinite(v)]
        return float(np.median(v)) if len(v) else None


def monitor(targets: Sequence[Target], factories: dict[str, Callable[[int], tuple]], **kw) -> MonitoringView:
    """Start Prometheus on `targets` (if it can be), run the stepped load through `factories`, read the series
    back with PromQL, stop Prometheus. Without Prometheus, the same load and servelab's own records.
    Keywords as `monitoring`'s."""
    with monitoring(targets, factories, **kw) as view:
        return view


@contextlib.contextmanager
def monitoring(targets: Sequence[Target], factories: dict[str, Callable[[int], tuple]], *,
               triton_model: str | None = None, steps: Sequence[int] = STEPS, step_s: float = 2.0,
               interval_s: float = 0.5, window_s: float | None = None,
               log_path: Path | None = None) -> Iterator[MonitoringView]:
    """`monitor`, with Prometheus still up inside the block: `view.prometheus_url` answers PromQL about the
    load just run (None where no Prometheus ran) until the block ends, which stops it whatever happened."""
    window_s = window_s or max(4 * interval_s, min(2.0, step_s))
    qs = queries(triton_model, window_s)
    prom, why = None, ""
    try:
        prom = PrometheusServer(targets, interval_s=interval_s, window_s=window_s, log_path=log_path).start()
        if not prom.wait_scraped([t.job for t in targets]):
            why = f"Prometheus started but could not scrape every target ({prom.targets_up()})"
    except Exception as exc:  # noqa: BLE001 - no Prometheus is a sentence in the lesson, not a failure
        prom, why = None, f"no Prometheus: {str(exc).splitlines()[0]}"
    try:
        t0, requests = stepped_load(factories, steps, step_s)
        end = t0 + len(steps) * step_s
        view = MonitoringView(steps=step_rows(t0, requests, steps, step_s), step_s=step_s, clients=tuple(steps),
                              prometheus=why, queries=qs, interval_s=interval_s, window_s=window_s,
                              started=t0, ended=end, outcomes=outcome_counts(requests, t0, end))
        shed = [r.t_start - t0 for r in requests if r.job == "servelab" and r.outcome == "shed"]
        view.shed_span = (min(shed), max(shed)) if shed else None
        if prom is not None:
            time.sleep(2 * interval_s)  # one more scrape and rule evaluation past the end
            view.rules = prom.rules_file.read_text()
            for name, q in qs.items():
                res = prom.query_range(q, t0, end, interval_s)
                if not res:
                    continue
                pts = np.array([(float(t) - t0, float(v)) for t, v in res[0]["values"]], dtype=float)
                view.series[name] = (pts[:, 0], pts[:, 1])
            if "alert" in view.series:
                view.alert_firing = _spans(view.series.pop("alert")[0], interval_s)
            if not why:
                view.prometheus = f"Prometheus {_version(prom.binary)} scraping every {interval_s:g} s"
                view.prometheus_url = prom.url
        try:
            yield view
        finally:
            view.prometheus_url = None  # stopped below: a later query would find nothing there
    finally:
        if prom is not None:
            prom.stop()


def outcome_counts(requests: list[Request], t_start: float, t_end: float) -> dict[str, dict[str, int]]:
    """{target: {outcome: requests}} of the requests that started during the load, as step_rows counts them."""
    out: dict[str, dict[str, int]] = {}
    for r in requests:
        if t_start <= r.t_start < t_end:
            job = out.setdefault(r.job, {})
            job[r.outcome] = job.get(r.outcome, 0) + 1
    return out


def _spans(times, gap: float) -> list[tuple]:
    """Contiguous spans of sample times (samples further apart than 1.5 × `gap` start a new span)."""
    out = []
    for t in sorted(times):
        if out and t - out[-1][1] <= 1.5 * gap:
            out[-1][1] = t
        else:
            out.append([t, t])
    return [(a, b + gap) for a, b in out]


def _version(binary: str) -> str:
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10)
        words = (out.stdout or out.stderr).split()
        return words[2] if len(words) > 2 and words[1] == "version" else "?"
    except Exception:  # noqa: BLE001
        return "?"


# --- the picture --------------------------------------------------------------------------------------------

def plot_monitoring(view: MonitoringView, path: Path, title: str = "Monitoring view under a stepped load") -> Path:
    """Three panels over time: clients and answers/s (200 and 503), the service's latency quantiles (Prometheus
    lines, servelab's own accepted p99 per step as dots), Triton's queue and compute per request. The alert's
    firing spans are shaded in every panel. Without Prometheus, servelab's own records only."""
    from servelab.bench.report.plots import pyplot, save_figure

    plt = pyplot()
    with_triton = any(r["target"] == "triton" for r in view.steps)
    fig, axes = plt.subplots(3 if with_triton else 2, 1, figsize=(9, 8 if with_triton else 5.5), sharex=True)
    load, lat, tri = (*axes, None) if not with_triton else axes
    edges = np.arange(len(view.clients) + 1) * view.step_s
    load.step(edges, list(view.clients) + [view.clients[-1]], where="post", color="black", lw=1.5, label="clients")
    load.set_ylabel("clients per server")
    rates = load.twinx()
    svc = [r for r in view.steps if r["target"] == "servelab"]
    mid = [(r["step"] - 0.5) * view.step_s for r in svc]
    for name, color, own in (("ok_rps", "tab:green", "ok_rps"), ("shed_rps", "tab:red", "shed_rps")):
        label = "answered 200/s" if name == "ok_rps" else "refused 503/s"
        if name in view.series:
            rates.plot(*view.series[name], color=color, label=f"service {label} (Prometheus)")
        rates.plot(mid, [r[own] for r in svc], "o", color=color, ms=4, label=f"service {label} (servelab records)")
    rates.set_ylabel("answers / s")
    rates.legend(fontsize=7, loc="upper right")
    for x, style in zip(QUANTILES, ("-", "--", ":"), strict=True):
        name = f"p{int(round(100 * x))}_ms"
        if name in view.series:
            lat.plot(*view.series[name], style, color="tab:blue", label=f"{name[:-3]} histogram_quantile (all answers)")
    lat.plot(mid, [r["accepted_p99_ms"] for r in svc], "o", color="tab:orange", ms=4,
             label="p99 of accepted requests (servelab records)")
    lat.set_ylabel("service latency (ms)")
    if tri is not None:
        for name, color in (("triton_queue_ms", "tab:purple"), ("triton_compute_ms", "tab:brown")):
            if name in view.series:
                tri.plot(*view.series[name], color=color,
                         label="Triton " + name[7:-3] + " time per request (Prometheus)")
        tri_own = [r for r in view.steps if r["target"] == "triton"]
        tri.plot([(r["step"] - 0.5) * view.step_s for r in tri_own], [r["accepted_p50_ms"] for r in tri_own], "o",
                 color="grey", ms=4, label="Triton client p50 (servelab records)")
        tri.set_ylabel("Triton (ms)")
    axes[-1].set_xlabel("seconds since the load started")
    for ax in (lat, tri or lat):
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="upper left")
    for ax in axes:
        for a, b in view.alert_firing:
            ax.axvspan(a, b, color="tab:red", alpha=0.12, lw=0)
        ax.grid(alpha=0.3)
    fig.suptitle(title + (f" — {ALERT} firing (shaded)" if view.alert_firing else "") +
                 ("" if view.scraped else f"\n{view.prometheus}"), fontsize=10)
    fig.tight_layout()
    path = save_figure(fig, path)
    plt.close(fig)
    return path
