"""The frontend's own cost (`servelab bench frontend`): requests/s and CPU per request of the service when the
device takes no time, beside the floor a bare ASGI app sets.

The service runs the `emulated` engine on a device profile whose t(B) is about a microsecond (`near_zero_profile`,
written into the run's folder), so every millisecond a request costs is the frontend's: HTTP, reading the body,
checking it, batching, answering. Beside it runs `asgi_floor` under the same uvicorn: it reads the same body and
answers the same 2,048 bytes, and nothing else. Each server runs alone on its cores (`taskset`, by default core 1)
and `wrk` (C) on the others (core 0), one body kind at a time:

    tensor   POST /embed/tensor, float32 [1, 3, 224, 224] (602,112 bytes), X-Shape 1,3,224,224
    uint8    the same image as uint8 pixels (150,528 bytes), X-Dtype uint8: normalised on the server
    jpeg     POST /embed, one 640×480 JPEG, decoded and preprocessed by the service

Every answer asked for is binary (Accept: application/octet-stream, 2,048 bytes). The service can come from other
source trees too (`trees`, e.g. the code before a change), started with that tree first on PYTHONPATH; windows of
all sides are interleaved, round by round, so a drift of the machine touches every side alike. A body kind a tree
does not take (its probe request is refused) is recorded as unavailable, not measured.

Records (experiment `frontend`, kind `load`), one per side, body kind and connection count: requests/s as the
median of the windows with their range, the server's CPU milliseconds per request (its process's CPU time over the
window ÷ requests answered) and its share of a core, latency p50/p99 from wrk, and the client's own CPU. Each names
its client (`client`: wrk's version) and the emulated device (`weights`, `params.device`): its embeddings are not
CLIP's, and no figure here is a model's. A `derived` record per side and connection count holds the goal: the
tensor path at ≥ 0.5 × the floor's requests/s, with the band from the windows' ranges.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from servelab.bench.load.wrk import WrkResult, wrk_run, wrk_version
from servelab.bench.results.goals import goal_record
from servelab.bench.results.records import Run, memory_snapshot
from servelab.errors import InvalidValue
from servelab.managed_process import ManagedProcess
from servelab.netutil import free_port
from servelab.service.process import ServiceProcess

EXPERIMENT = "frontend"
KINDS = ("tensor", "uint8", "jpeg")
FLOOR = "asgi-floor"
SERVICE = "fastapi"
GOAL_RATIO = 0.5  # the service's tensor path at half the floor's requests/s or more
ANSWER_BYTES = 2048
TOLERANCE = 0.1  # a point is stable when its windows (three or more) lie within this fraction of their median


# --- what is sent -------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Body:
    kind: str
    path: str
    data: bytes
    headers: dict


def bodies(kinds=KINDS, seed: int = 0) -> dict[str, Body]:
    """One request body per kind, all from the same synthetic photo (the uint8 pixels are exactly the float32
    tensor before its normalisation)."""
    from servelab.bench.load.inputs import sample_jpegs
    from servelab.model.preprocess import decode_image, normalise, pixels_pil

    jpeg = sample_jpegs(1, seed)[0]
    pixels = pixels_pil(decode_image(jpeg, reduce_to=224))[None]  # uint8 [1, 3, 224, 224]
    binary = {"Accept": "application/octet-stream"}
    tensor_headers = {**binary, "Content-Type": "application/octet-stream", "X-Shape": "1,3,224,224"}
    made = {
        "tensor": Body("tensor", "/embed/tensor", normalise(pixels).astype("<f4").tobytes(),
                       {**tensor_headers, "X-Dtype": "float32"}),
        "uint8": Body("uint8", "/embed/tensor", np.ascontiguousarray(pixels).tobytes(),
                      {**tensor_headers, "X-Dtype": "uint8"}),
        "jpeg": Body("jpeg", "/embed", jpeg, {**binary, "Content-Type": "image/jpeg"}),
    }
    unknown = set(kinds) - set(made)
    if unknown:
        raise InvalidValue(f"body kinds are {', '.join(KINDS)}; not {', '.join(sorted(unknown))}")
    return {k: made[k] for k in kinds}


def near_zero_profile(folder: Path):
    """A device profile file whose every batch takes 1 µs: the device is never what a request waits for."""
    from servelab.model.device_profile import DeviceProfile, write_profile

    p = DeviceProfile(name="near-zero", fixed_ms=0.001, per_image_ms=0.0, full_at=1,
                      source="a benchmark profile: 1 µs per batch, so that what a request costs is the serving "
                             "layer's alone (servelab bench frontend)")
    return p, write_profile(p, Path(folder) / "device-profile-near-zero.json")


# --- the servers --------------------------------------------------------------------------------------------

class PinnedService(ServiceProcess):
    """The service under `taskset -c cores`, from the source tree `tree` (None: this one)."""

    def __init__(self, *, cores: str | None, tree: Path | None, **kw):
        super().__init__(**kw)
        self.cores, self.tree = cores, tree

    def command(self) -> list[str]:
        return _pinned(self.cores, super().command())

    def environment(self) -> dict:
        env = super().environment()
        if self.tree is not None:
            env["PYTHONPATH"] = os.pathsep.join([str(self.tree), *filter(None, [env.get("PYTHONPATH")])])
        return env


class FloorProcess(ManagedProcess):
    """`asgi_floor` under uvicorn, under `taskset -c cores`."""

    name = FLOOR

    def __init__(self, *, cores: str | None, log_path: Path | None = None):
        super().__init__(log_path=log_path, startup_timeout=60.0)
        self.cores, self.port = cores, free_port()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def ready_url(self) -> str:
        return self.url + "/healthz"

    def command(self) -> list[str]:
        return _pinned(self.cores, [sys.executable, "-m", "uvicorn", "servelab.bench.servers.asgi_floor:app",
                                    "--host", self.host, "--port", str(self.port), "--no-access-log",
                                    "--log-level", "warning", "--http", "httptools"])


def _pinned(cores: str | None, cmd: list[str]) -> list[str]:
    return ["taskset", "-c", cores, *cmd] if cores is not None else cmd


def split_cores(server_cores: str | None = None, client_cores: str | None = None) -> tuple[str | None, str | None, str]:
    """(server cores, client cores, what was done): by default the client on the first usable core and the server
    on the second; one core only: nothing is pinned, and the records say so."""
    usable = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if server_cores is None and client_cores is None:
        if len(usable) < 2 or not _has_taskset():
            return None, None, "not pinned (fewer than two cores, or no taskset): client and server share the CPU"
        client_cores, server_cores = str(usable[0]), str(usable[1])
    return server_cores, client_cores, f"server on core(s) {server_cores}, wrk on core(s) {client_cores} (taskset)"


def _has_taskset() -> bool:
    import shutil

    return shutil.which("taskset") is not None


def _cpu_s(pid: int) -> float:
    import psutil

    proc = psutil.Process(pid)
    total = 0.0
    for p in [proc, *proc.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):
            t = p.cpu_times()
            total += t.user + t.system
    return total


def _load_average() -> list[float] | None:
    """The machine's 1, 5 and 15 minute load averages (what `uptime` says): how quiet the machine was."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def _git_sha(tree: Path | None) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(tree or Path(__file__).parent), "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, timeout=10)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


@dataclass
class Side:
    """One server measured: its label, the process, what it answers as (records' `server`, `weights`)."""

    label: str
    server: str
    proc: ManagedProcess
    weights: str
    tree: Path | None = None
    workers: int = 1
    env: dict | None = None  # settings given to the service beyond the benchmark's own (e.g. its batching delay)


def _probe(url: str, body: Body) -> str | None:
    """None when `body` gets 200 from `url`; else why not (the tree does not take this kind)."""
    import httpx

    try:
        r = httpx.post(url + body.path, content=body.data, headers=body.headers, timeout=30)
    except httpx.HTTPError as exc:
        return f"no answer: {exc}"
    if r.status_code != 200:
        return f"HTTP {r.status_code}: {r.text[:300]}"
    return None


# --- the experiment -----------------------------------------------------------------------------------------

def frontend(run: Run | str | None = None, *, kinds=KINDS, connections=(8, 32), window_s: float = 5.0,
             windows: int = 3, warmup_s: float = 1.0, trees: dict[str, Path | None] | None = None,
             floor: bool = True, workers: int = 1, server_cores: str | None = None,
             client_cores: str | None = None, quick: bool = False, env: dict | None = None) -> list[dict]:
    """Measure each side × body kind × connection count for `windows` interleaved windows of `window_s` seconds;
    records plus the goal records. `trees`: {label: source tree} of the service (default {"service": None}: this
    tree); `workers`: the service's frontend processes (SERVELAB_WORKERS)."""
    run = run if isinstance(run, Run) else Run(run_id=run, name=EXPERIMENT)
    if quick:
        window_s, windows, warmup_s = min(window_s, 1.0), min(windows, 2), min(warmup_s, 1.0)
    trees = trees or {SERVICE: None}
    server_cores, client_cores, pinning = split_cores(server_cores, client_cores)
    client = wrk_version()
    device, profile_path = near_zero_profile(run.dir)
    payloads = bodies(kinds)
    load_before = _load_average()
    out: list[dict] = []
    with contextlib.ExitStack() as stack:
        device_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="servelab-frontend-devices-")))
        service_env = {"SERVELAB_ENGINE": "emulated", "SERVELAB_DEVICE_PROFILE": str(profile_path),
                       "SERVELAB_DEVICE_DIR": str(device_dir / "state"), "SERVELAB_WARMUP_ITERS": 1,
                       "SERVELAB_WORKERS": workers, **(env or {})}
        sides: list[Side] = []
        if floor:
            proc = stack.enter_context(FloorProcess(cores=server_cores, log_path=run.dir / f"{FLOOR}.log"))
            sides.append(Side("floor", FLOOR, proc, "none (a bare ASGI app: no model, no device)"))
        for label, tree in trees.items():
            proc = stack.enter_context(PinnedService(cores=server_cores, tree=tree, env=service_env,
                                                     log_path=run.dir / f"{SERVICE}-{label}.log"))
            sides.append(Side(label, SERVICE, proc, device.label, tree=tree, workers=workers, env=dict(env or {})))
        unavailable: dict[tuple[str, str], str] = {}
        for side in sides:
            for body in payloads.values():
                why = _probe(side.proc.url, body)
                if why:
                    unavailable[(side.label, body.kind)] = why
                    out.append(run.record(EXPERIMENT, kind="unavailable", server=side.server, available=False,
                                          payload=body.kind, weights=side.weights, note=why,
                                          params={"side": side.label, "device": device.label}))
                elif warmup_s > 0:
                    wrk_run(side.proc.url + body.path, body.data, body.headers, connections=max(connections),
                            duration_s=warmup_s, cores=client_cores)
        # windows[side, kind, conns] = [(wrk result, server CPU seconds)], interleaved: every side once per round
        got: dict[tuple[str, str, int], list[tuple[WrkResult, float]]] = {}
        for _ in range(windows):
            for body in payloads.values():
                for c in connections:
                    for side in sides:
                        if (side.label, body.kind) in unavailable:
                            continue
                        cpu0 = _cpu_s(side.proc.pid)
                        res = wrk_run(side.proc.url + body.path, body.data, body.headers, connections=c,
                                      duration_s=window_s, cores=client_cores)
                        got.setdefault((side.label, body.kind, c), []).append((res, _cpu_s(side.proc.pid) - cpu0))
        machine_load = {"load_average_before": load_before, "load_average_after": _load_average()}
        by_key = {}
        for side in sides:
            for body in payloads.values():
                for c in connections:
                    ws = got.get((side.label, body.kind, c))
                    if not ws:
                        continue
                    rec = _record(run, side, body, c, ws, client=client, pinning=pinning, device=device,
                                  profile_path=profile_path, window_s=window_s, quick=quick, machine_load=machine_load)
                    by_key[(side.label, body.kind, c)] = rec
                    out.append(rec)
        out += _goals(run, sides, connections, by_key)
    return out


def _record(run: Run, side: Side, body: Body, connections: int, ws, *, client, pinning, device, profile_path,
            window_s, quick, machine_load) -> dict:
    rates = [r.ok_per_s for r, _ in ws]
    cpu_ms = [1000 * cpu / max(r.requests - r.non_2xx, 1) for r, cpu in ws]
    cpu_pct = [100 * cpu / r.duration_s for r, cpu in ws if r.duration_s > 0]
    median = statistics.median(rates)
    requests = sum(r.requests for r, _ in ws)
    non_2xx = sum(r.non_2xx for r, _ in ws)
    return run.record(
        EXPERIMENT, kind="load", server=side.server, backend=side.label, engine="emulated" if side.server == SERVICE
        else None, protocol="http", payload=body.kind, batch=1, concurrency=connections, weights=side.weights,
        throughput_img_s=round(median, 1), throughput_min_img_s=round(min(rates), 1),
        throughput_max_img_s=round(max(rates), 1), requests_per_s=round(median, 1),
        requests_per_s_min=round(min(rates), 1), requests_per_s_max=round(max(rates), 1),
        server_cpu_ms_per_request=round(statistics.median(cpu_ms), 4),
        server_cpu_ms_per_request_min=round(min(cpu_ms), 4), server_cpu_ms_per_request_max=round(max(cpu_ms), 4),
        server_cpu_pct=round(statistics.median(cpu_pct), 1) if cpu_pct else None,
        client_cpu_pct=round(statistics.median([100 * r.cpu_s / r.duration_s for r, _ in ws]), 1),
        latency_p50_ms=round(statistics.median(r.p50_ms for r, _ in ws), 3),
        latency_p99_ms=round(statistics.median(r.p99_ms for r, _ in ws), 3),
        requests=requests, errors=non_2xx + sum(r.socket_errors for r, _ in ws), non_2xx=non_2xx,
        repeats=len(ws), windows_used=len(ws), spread=round((max(rates) - min(rates)) / median, 4) if median else None,
        stable=bool(len(ws) >= 3 and median and (max(rates) - min(rates)) / median <= TOLERANCE), client=client, cpu_pinning=pinning, quick=quick, memory=memory_snapshot(side.proc.pid),
        note=("emulated device (near-zero t(B)): the frontend's cost, not a model's" if side.server == SERVICE
              else "bare ASGI floor under the same uvicorn: reads the body, answers 2,048 bytes"),
        params={"side": side.label, "tree": str(side.tree) if side.tree else None, "git_sha": _git_sha(side.tree),
                "workers": side.workers if side.server == SERVICE else 1, "service_env": side.env,
                "device": device.label,
                "device_profile": str(profile_path), "body_bytes": len(body.data), "answer_bytes": ANSWER_BYTES,
                "path": body.path, "window_s": window_s, "client": client, "cpu_pinning": pinning, **machine_load,
                "windows": [{"requests_per_s": round(r.ok_per_s, 1), "server_cpu_s": round(cpu, 4),
                             "requests": r.requests, "non_2xx": r.non_2xx, "p50_ms": r.p50_ms, "p99_ms": r.p99_ms,
                             "client_cpu_s": round(r.cpu_s, 4)} for r, cpu in ws]})


def _goals(run: Run, sides: list[Side], connections, by_key: dict) -> list[dict]:
    out = []
    for side in sides:
        if side.server != SERVICE:
            continue
        for c in connections:
            svc, fl = by_key.get((side.label, "tensor", c)), by_key.get(("floor", "tensor", c))
            if not (svc and fl and fl["requests_per_s"]):
                continue
            band = (svc["requests_per_s_min"] / fl["requests_per_s_max"], svc["requests_per_s_max"] / fl["requests_per_s_min"])
            out.append(goal_record(run, EXPERIMENT, f"{side.label}: tensor requests/s ÷ the bare-ASGI floor's, {c} "
                                   "connections, one core", svc["requests_per_s"] / fl["requests_per_s"], ">=",
                                   GOAL_RATIO, band=band, inputs=[svc, fl],
                                   note=f"client {svc['client']}; {svc['params']['device']}"))
    return out


# --- reading it ---------------------------------------------------------------------------------------------

def table_rows(records: list[dict]) -> list[dict]:
    """One row per side, body kind and connection count: requests/s (range), CPU ms per request, the share of the
    floor's requests/s for the same body and connections (`x_floor`), and the floor's CPU per request over this
    one (`x_floor_cpu`: the share a busy core would reach)."""
    load = [r for r in records if r.get("experiment") == EXPERIMENT and r.get("kind") == "load"]
    floor = {(r["payload"], r["concurrency"]): r for r in load if r["server"] == FLOOR}
    rows = []
    for r in load:
        f = floor.get((r["payload"], r["concurrency"]))
        rows.append({"side": r["backend"], "server": r["server"], "body": r["payload"], "connections": r["concurrency"],
                     "requests_per_s": r["requests_per_s"],
                     "range": f"{r['requests_per_s_min']:.0f}–{r['requests_per_s_max']:.0f}",
                     "cpu_ms_per_request": r["server_cpu_ms_per_request"],
                     "cpu_ms_range": f"{r['server_cpu_ms_per_request_min']:.3f}–{r['server_cpu_ms_per_request_max']:.3f}",
                     "server_cpu_pct": r["server_cpu_pct"], "client_cpu_pct": r["client_cpu_pct"],
                     "x_floor": round(r["requests_per_s"] / f["requests_per_s"], 2) if f and f["requests_per_s"] else None,
                     # the share of the floor's rate a server with this CPU cost per request would reach if its core
                     # were busy all the time (a batching delay can leave it idle, at a few connections)
                     "x_floor_cpu": round(f["server_cpu_ms_per_request"] / r["server_cpu_ms_per_request"], 2)
                     if f and r["server_cpu_ms_per_request"] else None,
                     "non_2xx": r["non_2xx"], "client": r["client"]})
    return rows


def plot(records: list[dict], path: Path) -> Path | None:
    """Requests/s per body kind, one bar per side (whiskers: the windows' range), one panel per connection count."""
    from servelab.bench.report.plots import pyplot, save_figure

    rows = table_rows(records)
    if not rows:
        return None
    plt = pyplot()
    conns = sorted({r["connections"] for r in rows})
    kinds = [k for k in KINDS if any(r["body"] == k for r in rows)]
    sides = list(dict.fromkeys(r["side"] for r in rows))
    fig, axes = plt.subplots(1, len(conns), figsize=(5 * len(conns), 4), squeeze=False)
    width = 0.8 / len(sides)
    load = {(r["backend"], r["payload"], r["concurrency"]): r for r in records
            if r.get("experiment") == EXPERIMENT and r.get("kind") == "load"}
    for ax, c in zip(axes[0], conns, strict=True):
        for i, side in enumerate(sides):
            xs, ys, lo, hi = [], [], [], []
            for k, kind in enumerate(kinds):
                r = load.get((side, kind, c))
                if r:
                    xs.append(k + i * width)
                    ys.append(r["requests_per_s"])
                    lo.append(r["requests_per_s"] - r["requests_per_s_min"])
                    hi.append(r["requests_per_s_max"] - r["requests_per_s"])
            ax.bar(xs, ys, width, yerr=[lo, hi], capsize=3, label=side)
        ax.set_xticks([k + width * (len(sides) - 1) / 2 for k in range(len(kinds))], labels=kinds)
        ax.set_title(f"{c} connections")
        ax.set_ylabel("requests/s (one image each)")
        ax.grid(alpha=0.3, axis="y")
        ax.legend(fontsize=7)
    client = rows[0]["client"]
    fig.suptitle(f"The frontend's cost on one core, emulated near-zero device (client: {client})", fontsize=9)
    fig.tight_layout()
    path = save_figure(fig, path)
    plt.close(fig)
    return path


def parse_trees(text: str | None) -> dict[str, Path | None] | None:
    """`after=.,before=/work/other` -> {"after": Path("."), "before": Path("/work/other")}; None: this tree alone."""
    if not text:
        return None
    trees = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        label, sep, path = part.partition("=")
        if not sep or not label or not path:
            raise InvalidValue(f"--trees takes LABEL=PATH pairs separated by commas, got {part!r}")
        tree = Path(path).resolve()
        if not (tree / "servelab" / "service").is_dir():
            raise InvalidValue(f"--trees {label}={path}: no servelab/service in that folder")
        trees[label] = tree
    return trees
