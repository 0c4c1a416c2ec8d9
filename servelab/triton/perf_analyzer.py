"""NVIDIA's perf_analyzer against a running Triton, from this machine: find (or fetch) the binary, run one
point, read its CSV.

    from servelab.triton import perf_analyzer as pa
    binary = pa.find()                       # Path, or None: `servelab triton get-perf-analyzer` fetches it
    cmd = pa.command(binary, "127.0.0.1:8003", "openclip_vit_b32_cpu", concurrency=8, csv=Path("pa.csv"))
    result = pa.run(cmd, csv=Path("pa.csv"))   # PerfResult: throughput, p50/p99, server queue/compute, output
    results = pa.measure(cmd, Path("pa.csv"), fallback_requests=16)  # one per concurrency; `counted` when the
                                             # windows never settled and three windows of 16 requests stood in
    env, argv = pa.parse_line("TRITON_CLIENT_GRPC_CHANNEL_MAX_SHARE_COUNT=1 perf_analyzer -i grpc …")  # a typed line

Where the binary comes from: the perf-analyzer wheels need glibc 2.38 and tritonclient >= 2.61 no longer
ships it, but the `tritonclient==2.51.0` wheel carries a `perf_analyzer` that runs here once two libraries
resolve, `libcudart.so.12` and `libb64.so.0d`; the nvidia-pytriton wheel (our tritonserver) carries copies of
both under `nvidia_pytriton.libs`. `install()` downloads that one wheel with pip (no dependencies, nothing
installed into the environment) and keeps only the binary, in build/perf_analyzer/; `library_dir()` links the
two libraries under their plain names beside it for LD_LIBRARY_PATH. On a GPU node, NVIDIA's `-sdk` container
has perf_analyzer already (docker/compose.perf-analyzer.yaml).
"""

from __future__ import annotations

import csv as csvlib
import dataclasses
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

from servelab.config import workspace
from servelab.errors import CannotRun, InvalidValue
from servelab.model.contract import INPUT_NAME, INPUT_SHAPE

WHEEL = "tritonclient==2.51.0"
NAME = "perf_analyzer"
# Triton's C++ gRPC client lets up to this many clients of one address share a channel (one HTTP/2 connection);
# perf_analyzer's concurrent clients follow it, so 1 gives each client its own connection
SHARE_ENV = "TRITON_CLIENT_GRPC_CHANNEL_MAX_SHARE_COUNT"


def home() -> Path:
    return workspace() / "build" / NAME


def find() -> Path | None:
    """The perf_analyzer binary: build/perf_analyzer/ first, then PATH; None when neither has one."""
    local = home() / NAME
    if local.is_file() and os.access(local, os.X_OK):
        return local
    found = shutil.which(NAME)
    return Path(found) if found else None


def install(dest: Path | None = None) -> Path:
    """Download the tritonclient 2.51.0 wheel with pip and keep its perf_analyzer in `dest` (build/perf_analyzer)."""
    dest = Path(dest or home())
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                        "--platform", "manylinux1_x86_64", WHEEL, "-d", tmp], check=True, capture_output=True)
        wheel = next(Path(tmp).glob("tritonclient-*.whl"))
        with zipfile.ZipFile(wheel) as z:
            member = next(n for n in z.namelist() if n.endswith(f"/bin/{NAME}"))
            target = dest / NAME
            with z.open(member) as src, open(target, "wb") as out:
                shutil.copyfileobj(src, out)
    target.chmod(target.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return target


def library_dir(dest: Path | None = None) -> Path:
    """A folder with libcudart.so.12 and libb64.so.0d linked from the nvidia-pytriton wheel's libraries."""
    import pytriton

    libs = Path(pytriton.__file__).resolve().parent.parent / "nvidia_pytriton.libs"
    dest = Path(dest or home() / "lib")
    dest.mkdir(parents=True, exist_ok=True)
    for plain, pattern in (("libcudart.so.12", "libcudart-*.so.12*"), ("libb64.so.0d", "libb64-*.so.0d")):
        found = sorted(libs.glob(pattern))
        if not found:
            raise FileNotFoundError(f"{pattern} not in {libs}")
        link = dest / plain
        if not (link.is_symlink() and Path(os.readlink(link)) == found[0]):
            link.unlink(missing_ok=True)
            link.symlink_to(found[0])
    return dest


def command(binary: Path, address: str, model: str, *, concurrency: int = 8, input_name: str = INPUT_NAME,
            shape: str = ",".join(map(str, INPUT_SHAPE)), requests: int = 24, stability_pct: int = 10, max_trials: int = 5,
            time_window_ms: int | None = None, csv: Path | None = None,
            input_data: Path | None = None) -> list[str]:
    """perf_analyzer's command line for one point: batch-1 requests of random data from `concurrency` clients over
    HTTP, in windows of `requests` completed requests (count_windows), measured until the last three windows agree
    within `stability_pct` % or `max_trials` windows were measured (then it fails: "Failed to obtain stable
    measurement").

    A line that must complete however busy the machine is `fixed_count(command(...), n)`: not `--request-count`,
    whose figure perf_analyzer rounds (see `fixed_count`).
    time_window_ms: windows of that many milliseconds instead of `requests` requests (time_windows), under the
    same stability rule; a `stability_pct` over 100 with `max_trials` 3 takes the first three windows, whatever
    they say (perf_analyzer reports the three together), as a load generator's fixed duration does.
    input_data: a JSON file of the tensors to send (`input_data_file`: real pixels, say) instead of random data."""
    cmd = [str(binary), "-m", model, "-u", address, "-i", "http", "-b", "1", "--shape", f"{input_name}:{shape}",
           "--concurrency-range", str(concurrency)]
    if time_window_ms is not None:
        cmd += ["--measurement-mode", "time_windows", "--measurement-interval", str(time_window_ms),
                "--stability-percentage", str(stability_pct), "--max-trials", str(max_trials)]
    else:
        cmd += ["--measurement-mode", "count_windows", "--measurement-request-count", str(requests),
                "--stability-percentage", str(stability_pct), "--max-trials", str(max_trials)]
    if input_data is not None:
        cmd += ["--input-data", str(input_data)]
    return cmd + (["-f", str(csv)] if csv else [])


def input_data_file(path: Path, tensors: dict) -> Path:
    """Write perf_analyzer's --input-data JSON: one request of `tensors` ({input name: array without the batch
    dimension}), each as base64 of its bytes with its shape. Returns `path`."""
    import base64
    import json

    import numpy as np

    data = {name: {"b64": base64.b64encode(np.ascontiguousarray(a).tobytes()).decode(), "shape": list(a.shape)}
            for name, a in tensors.items()}
    Path(path).write_text(json.dumps({"data": [data]}))
    return Path(path)


@dataclass(frozen=True)
class PerfResult:
    concurrency: int
    throughput_img_s: float
    latency_p50_ms: float
    latency_p99_ms: float
    server_queue_ms: float
    server_compute_ms: float
    output: str  # what perf_analyzer printed
    connections: int | None = None  # the most TCP connections it held to the server at once (None: not counted)
    counted: int | None = None  # the windows never settled: three windows of this many requests instead (`measure`)


def environment() -> dict:
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (str(library_dir()), env.get("LD_LIBRARY_PATH", "")) if p)
    return env


def run(cmd: list[str], csv: Path, timeout: float = 120.0, env: dict | None = None,
        count_port: int | None = None) -> PerfResult:
    """Run `cmd` (from `command` or `parse_line`, with the same `csv`) with `env` added to its environment;
    CannotRun with perf_analyzer's last lines on failure. `count_port`: also count the TCP connections it holds
    to that port (sampled while it runs; the peak goes into `connections`). The CSV's first row."""
    return _run_rows(cmd, csv, timeout, env, count_port)[0]


UNSETTLED = "stable measurement"  # in perf_analyzer's message when its windows never agreed within its trials
# the options that choose how perf_analyzer measures (windows, their size, the stability rule, a fixed count)
_MEASUREMENT = {"--measurement-mode", "--measurement-request-count", "--measurement-interval", "-p",
                "--stability-percentage", "-s", "--max-trials", "-r", "--request-count"}


FIRST_WINDOWS = ("--stability-percentage", "999", "--max-trials", "3")  # three windows, taken whatever they say


def fixed_count(cmd: list[str], requests: int) -> list[str]:
    """`cmd` with its measurement options replaced by one fixed count of requests: three windows of `requests`
    requests each (count_windows), taken whatever they say (a stability percentage of 999), so it always
    completes, however busy the machine, over a whole `--concurrency-range`. Not `--request-count`: its figure is
    that count over the elapsed time rounded up to whole seconds (20 requests in 2.7 s read 6.7/s, not 7.4), and
    perf_analyzer takes it for one concurrency only."""
    out, skip = [], False
    for word in cmd:
        if skip:
            skip = False
        elif word in _MEASUREMENT:
            skip = True
        elif not word.startswith(tuple(f"{o}=" for o in _MEASUREMENT if o.startswith("--"))):
            out.append(word)
    return out + ["--measurement-mode", "count_windows", "--measurement-request-count", str(requests), *FIRST_WINDOWS]


def concurrencies(cmd: list[str]) -> list[int]:
    """The concurrency levels `cmd` asks for: `--concurrency-range start[:end[:step]]` (1 when not given)."""
    start, end, step = ((option(cmd, "--concurrency-range") or "1").split(":") + ["", ""])[:3]
    return list(range(int(start), int(end or start) + 1, int(step or 1)))


def measure(cmd: list[str], csv: Path, *, fallback_requests: int, timeout: float = 120.0, env: dict | None = None,
            count_port: int | None = None) -> list[PerfResult]:
    """Run `cmd` as `run` does and return one result per concurrency of its `--concurrency-range`, in order.
    When its windows never settle ("Failed to obtain stable measurement", a busy machine; or a level missing
    from its CSV), run it once more as one fixed count, three windows of `fallback_requests` requests taken as
    they come (`fixed_count`), and say so: every result's `counted` is then `fallback_requests`."""
    try:
        rows = _run_rows(cmd, csv, timeout, env, count_port)
    except CannotRun as exc:
        if UNSETTLED not in str(exc):
            raise
        rows = []
    if sorted(r.concurrency for r in rows) == concurrencies(cmd):
        return sorted(rows, key=lambda r: r.concurrency)
    Path(csv).unlink(missing_ok=True)
    rows = _run_rows(fixed_count(cmd, fallback_requests), csv, timeout, env, count_port)
    return sorted((dataclasses.replace(r, counted=fallback_requests) for r in rows), key=lambda r: r.concurrency)


def _run_rows(cmd: list[str], csv: Path, timeout: float, env: dict | None, count_port: int | None) -> list[PerfResult]:
    proc = subprocess.Popen(cmd, env={**environment(), **(env or {})}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    deadline, peak = time.monotonic() + timeout, 0
    while True:
        try:
            output, _ = proc.communicate(timeout=0.1)
            break
        except subprocess.TimeoutExpired:
            if count_port is not None:
                peak = max(peak, connections_to(proc.pid, count_port))
            if time.monotonic() > deadline:
                proc.kill()
                proc.communicate()
                raise CannotRun(f"perf_analyzer ran past {timeout:.0f} s: {shlex.join(cmd)}") from None
    if proc.returncode != 0 or not Path(csv).is_file():
        lines = output.strip().splitlines()
        said = [line for line in lines if re.match(r"\s*(error|failed|Failed)", line)] or lines[-3:]  # its own words
        raise CannotRun(f"perf_analyzer exited {proc.returncode}: {' | '.join(said[:3])}")
    return [dataclasses.replace(r, connections=peak if count_port is not None else None)
            for r in parse_csv_rows(Path(csv).read_text(), output)]


def connections_to(pid: int, port: int) -> int:
    """How many established TCP connections process `pid` holds to `port` right now (0 once it has exited)."""
    import psutil

    try:
        conns = psutil.Process(pid).net_connections(kind="tcp")
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return 0
    return sum(1 for c in conns if c.raddr and c.raddr.port == port and c.status == psutil.CONN_ESTABLISHED)


_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")


def parse_line(line: str) -> tuple[dict[str, str], list[str]]:
    """A command line as typed in a shell, `VAR=value … perf_analyzer -m … -i grpc …`, as (the environment
    assignments before the command, the command's argv); ValueError when no command follows them."""
    words = shlex.split(line)
    env = {}
    while words and _ASSIGNMENT.match(words[0]):
        key, _, value = words.pop(0).partition("=")
        env[key] = value
    if not words:
        raise InvalidValue(f"no command in {line!r}: write the perf_analyzer path after any VAR=value")
    return env, words


def option(argv: list[str], *names: str, default: str | None = None) -> str | None:
    """The value of the first of `names` in `argv` (`-i grpc`, `--concurrency-range=8` or `--concurrency-range 8`)."""
    for k, word in enumerate(argv):
        for name in names:
            if word == name and k + 1 < len(argv):
                return argv[k + 1]
            if name.startswith("--") and word.startswith(name + "="):
                return word[len(name) + 1:]
    return default


def parse_csv(text: str, output: str = "") -> PerfResult:
    """perf_analyzer's `-f` CSV (latencies in microseconds) -> PerfResult of its first row."""
    return parse_csv_rows(text, output)[0]


def parse_csv_rows(text: str, output: str = "") -> list[PerfResult]:
    """perf_analyzer's `-f` CSV -> one PerfResult per row (per concurrency), in concurrency order."""
    def result(row):
        us = lambda key: float(row[key]) / 1000.0  # noqa: E731
        return PerfResult(concurrency=int(row["Concurrency"]), throughput_img_s=float(row["Inferences/Second"]),
                          latency_p50_ms=us("p50 latency"), latency_p99_ms=us("p99 latency"),
                          server_queue_ms=us("Server Queue"), server_compute_ms=us("Server Compute Infer"),
                          output=output)

    rows = sorted((result(row) for row in csvlib.DictReader(text.splitlines())), key=lambda r: r.concurrency)
    if not rows:
        raise CannotRun("perf_analyzer's CSV has no row")
    return rows
