"""The GPU reference run: what one short lease on a GPU machine measures, stage by stage, into one run folder.

    servelab bench gpu-reference --stage raw --run-id R       # the engine itself, no server
    servelab bench gpu-reference --stage service --run-id R   # the FastAPI service on the GPU
    servelab bench gpu-reference --stage triton --run-id R    # the embedded tritonserver, encoder on KIND_GPU

A lease can end between two calls, so each stage is its own command and adds its records to the same run; the
report is rewritten after each one. The stages:

- raw: the torch engine with its input already on the GPU, timed around torch.cuda.synchronize (what the
  device can do): fp32 / fp16 / bf16 at batch 1 … 256, then CUDA graphs and torch.compile at the best
  precision; the same engine fed from host memory as a server feeds it (the copy to the GPU included), and
  three ways of making that copy; fp16 and bf16 against fp32 on the lab's photos (cosine); JPEG decode and
  resize on the GPU (nvJPEG, batched) against the CPU path on every core.
- service: the FastAPI service on the GPU (torch, the best half precision): JPEG-in from 128 clients with the
  decode on the device (batched nvJPEG in the engine) and on the CPU (the decode pool), each with 1 and 4 frontend
  processes; then batch-1 requests from 1 to 128 clients, tensor-in and JPEG-in, with the decode the service
  chooses (each record names it); then with a torch thread per core, as before the engine's threads were bounded.
- triton: the embedded tritonserver with the python-backend encoder on KIND_GPU (ONNX Runtime's CUDA provider;
  the bundled server has no onnxruntime backend), the same sweep; and ONNX Runtime CUDA in-process; then the
  same encoder running servelab's torch engine (bf16/fp16 as the raw stage chose) where onnxruntime-gpu is absent,
  driven by the Python clients and then by perf_analyzer.
- ceiling: the in-process ceiling of a JPEG-in path, batched nvJPEG decode into the input of one CUDA graph of
  the forward pass in the best half precision, at batch 64, 128 and 256 (no server, no copy of float pixels).
- profile: where one loaded service's CPU goes: py-spy samples the FastAPI service (all its threads, native
  frames included) while 64 clients send it batch-1 tensors; the top functions by own samples, and the raw
  stacks beside the run.

The clients are this machine's one Python process (threads): past a few thousand requests per second the load
generator, not the server, can be the limit. Each served record says how busy the client process and the
server were (`client_process_cpu_pct`, `server_cpu_pct`, % of one core) and the GPU's mean utilisation
(`gpu_util_pct`, NVML), so a reader can tell which one was.
"""

from __future__ import annotations

import time

import numpy as np

from servelab.bench.results.records import Run
from servelab.errors import CannotRun, InvalidValue
from servelab.fingerprint import usable_cores
from servelab.vocabulary import Precision

STAGES = ("raw", "service", "triton", "ceiling", "profile")
BATCHES = (1, 8, 32, 64, 128, 256)
CONCURRENCIES = (1, 16, 64, 128)
SERVED_MAX_BATCH = 128  # the service's micro-batch and Triton's max_batch_size: every client's request in one batch


def _windows(step, images: int, *, window_s: float, windows: int, sync) -> list[float]:
    """images/s of `windows` windows of repeated `step()` calls, each at least `window_s` long (after warm-up)."""
    for _ in range(3):
        step()
    sync()
    t0 = time.perf_counter()
    step()
    sync()
    n = max(3, int(window_s / max(time.perf_counter() - t0, 1e-6)))
    rates = []
    for _ in range(windows):
        t0 = time.perf_counter()
        for _ in range(n):
            step()
        sync()
        rates.append(n * images / (time.perf_counter() - t0))
    return rates


def _rate_fields(rates: list[float], batch: int) -> dict:
    med = float(np.median(rates))
    return {"throughput_img_s": round(med, 1), "throughput_min_img_s": round(min(rates), 1),
            "throughput_max_img_s": round(max(rates), 1), "latency_p50_ms": round(1000 * batch / med, 3),
            "window_throughput_img_s": [round(r, 1) for r in rates], "windows_used": len(rates),
            "repeats": len(rates), "spread": round((max(rates) - min(rates)) / med, 4),
            "stable": bool(max(rates) - min(rates) <= 0.2 * med)}  # the windows within ±10 % of their median


def device_resident(run: Run, *, device: str = "cuda", precisions=tuple(Precision), batches=BATCHES,
                    window_s: float = 0.5, windows: int = 5) -> list[dict]:
    """The torch engine's module on inputs already on `device`: what the engine itself does, no copy, no server.
    Every precision at every batch size, run as PyTorch runs it (eager: one launch per kernel)."""
    import torch

    from servelab.config import Settings
    from servelab.model.engines import make_embedder

    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    out = []
    for precision in precisions:
        emb = make_embedder(Settings.from_env(), engine="torch", provider=device, precision=precision)
        module, dtype = emb.module, emb.dtype
        for b in batches:
            x = torch.randn(b, 3, 224, 224, device=device, dtype=dtype)
            with torch.inference_mode():
                rates = _windows(lambda m=module, x=x: m(x), b, window_s=window_s, windows=windows, sync=sync)
            out.append(_record(run, precision, "eager", b, rates, device))
        del emb
        if device == "cuda":
            torch.cuda.empty_cache()
    return out


def best_precision(records: list[dict]) -> str:
    """The precision of the fastest device-resident eager record (fp16 when there is none)."""
    eager = [r for r in records if r.get("experiment") == "gpu-raw" and r.get("variant") == "eager"]
    return max(eager, key=lambda r: r["throughput_img_s"])["precision"] if eager else "fp16"


def host_copies(run: Run, precision: str, *, batches=(64, 256), window_s: float = 0.5,
                windows: int = 5) -> list[dict]:
    """Where the time of a host-fed batch goes: the engine's own way (`.to(device, dtype)` in one call),
    copying float32 and converting on the GPU, and copying from pinned memory without blocking; each with the
    forward pass, so the figures compare with the host-fed engine's."""
    import torch

    from servelab.config import Settings
    from servelab.model.engines import make_embedder

    emb = make_embedder(Settings.from_env(), engine="torch", provider="cuda", precision=precision)
    module, dtype, out = emb.module, emb.dtype, []
    for b in batches:
        host = torch.randn(b, 3, 224, 224)  # float32, pageable: what torch.from_numpy gives the engine
        pinned = host.pin_memory()
        ways = {
            "to(device, dtype) in one call": lambda h=host: module(h.to("cuda", dtype)),
            "copy float32, convert on the GPU": lambda h=host: module(h.to("cuda").to(dtype)),
            "pinned, non-blocking copy, convert on the GPU":
                lambda h=pinned: module(h.to("cuda", non_blocking=True).to(dtype)),
        }
        for way, step in ways.items():
            with torch.inference_mode():
                rates = _windows(step, b, window_s=window_s, windows=windows, sync=torch.cuda.synchronize)
            out.append(run.record("gpu-host-copy", kind="raw", server="in-process", backend=way, engine="torch",
                                  provider="cuda", protocol="inproc", payload="tensor", batch=b, concurrency=1,
                                  precision=precision, **_rate_fields(rates, b),
                                  note=f"a float32 batch from host memory: {way}; with the forward pass"))
    return out


def launch_variants(run: Run, precision: str, *, batches=BATCHES, window_s: float = 0.5, windows: int = 5,
                    time_left=lambda: 1e9) -> list[dict]:
    """At one precision, the forward pass captured in a CUDA graph (one launch for the whole network) at every
    batch size, then compiled by torch.compile at the smallest and largest, each while `time_left()` allows."""
    import torch

    from servelab.config import Settings
    from servelab.model.engines import make_embedder

    sync, out = torch.cuda.synchronize, []
    emb = make_embedder(Settings.from_env(), engine="torch", provider="cuda", precision=precision)
    for b in batches:
        if time_left() < 30:
            return out
        out.append(_graphed(run, emb, b, precision, window_s, windows))
    compiled = torch.compile(emb.module, dynamic=False)
    for b in (batches[0], batches[-1]):
        if time_left() < 90:  # a compile of this network takes tens of seconds per shape
            return out
        x = torch.randn(b, 3, 224, 224, device="cuda", dtype=emb.dtype)
        t0 = time.perf_counter()
        with torch.inference_mode():
            compiled(x)
            sync()
            compile_s = time.perf_counter() - t0
            rates = _windows(lambda x=x: compiled(x), b, window_s=window_s, windows=windows, sync=sync)
        out.append(_record(run, precision, "compile", b, rates, "cuda", compile_s=round(compile_s, 1)))
    return out


def _graphed(run: Run, emb, b: int, precision: str, window_s: float, windows: int) -> dict:
    """One CUDA graph of the forward pass at batch `b`, replayed: the launch cost of ~150 kernels paid once."""
    import torch

    static_x = torch.randn(b, 3, 224, 224, device="cuda", dtype=emb.dtype)
    from servelab.model.engines import capture_cuda_graph

    with torch.inference_mode():
        graph, _ = capture_cuda_graph(emb.module, static_x)
    rates = _windows(graph.replay, b, window_s=window_s, windows=windows, sync=torch.cuda.synchronize)
    return _record(run, precision, "cuda-graph", b, rates, "cuda")


def _record(run: Run, precision: str, variant: str, batch: int, rates: list[float], device: str, **extra) -> dict:
    return run.record("gpu-raw", kind="raw", server="in-process", backend="torch (input on the device)",
                      engine="torch", provider=device, protocol="inproc", payload="tensor", batch=batch,
                      concurrency=1, precision=precision, variant=variant,
                      errors=0, requests=None, **_rate_fields(rates, batch), **extra,
                      note="timed on the device: the input is already there, nothing is copied; "
                           f"{variant}, {precision}")


def jpeg_ceiling(run: Run, precision: str, *, device: str = "cuda", batches=(64, 128, 256), window_s: float = 0.5,
                 windows: int = 5) -> list[dict]:
    """JPEG bytes -> embeddings without a server: one batched decode on `device` (nvJPEG on a GPU) written into
    the static input of the forward pass, replayed as one CUDA graph (eager on a CPU, which has no graphs)."""
    import torch

    from servelab.bench.load.inputs import sample_jpegs
    from servelab.config import Settings
    from servelab.model.engines import capture_cuda_graph, make_embedder
    from servelab.model.gpu_decode import preprocess_jpegs

    on_gpu = device == "cuda"
    sync = torch.cuda.synchronize if on_gpu else (lambda: None)
    emb = make_embedder(Settings.from_env(), engine="torch", provider=device, precision=precision)
    jpegs, out = list(sample_jpegs(max(batches))), []
    for b in batches:
        static_x = torch.zeros(b, 3, 224, 224, device=device, dtype=emb.dtype)
        with torch.inference_mode():
            forward = lambda x=static_x: emb.module(x)  # noqa: E731
            if on_gpu:
                forward = capture_cuda_graph(emb.module, static_x)[0].replay

            def step(b=b, static_x=static_x, forward=forward):
                static_x.copy_(preprocess_jpegs(jpegs[:b], device=device))  # the cast to half happens in the copy
                forward()

            rates = _windows(step, b, window_s=window_s, windows=windows, sync=sync)
        out.append(run.record("gpu-ceiling", kind="raw", server="in-process", backend="decode + forward in-process",
                              engine="torch", provider=device, protocol="inproc", payload="jpeg", batch=b,
                              concurrency=1, precision=precision, variant="cuda-graph" if on_gpu else "eager",
                              **_rate_fields(rates, b),
                              note=f"{b} lab photos: one batched decode on {device} into the static input, then "
                                   + ("the forward pass as one CUDA graph" if on_gpu else "the forward pass, eager")))
    return out


def top_frames(collapsed: str, n: int = 15) -> list[dict]:
    """py-spy's raw output (one `frame;frame;… count` line per stack) -> the `n` functions with the most samples
    where they were the innermost frame (own time), with their share of all samples."""
    own: dict[str, int] = {}
    total = 0
    for line in collapsed.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        total += int(count)
        leaf = stack.split(";")[-1]
        own[leaf] = own.get(leaf, 0) + int(count)
    ranked = sorted(own.items(), key=lambda kv: -kv[1])[:n]
    return [{"frame": f, "samples": c, "share": round(c / total, 4)} for f, c in ranked] if total else []


def profile_service(run: Run, *, seconds: float = 15.0, concurrency: int = 64, rate_hz: int = 100, opts=None,
                    env: dict | None = None) -> list[dict]:
    """py-spy on the FastAPI service while `concurrency` clients load it: the top functions by own samples, as a
    record; the collapsed stacks stay in the run folder (py-spy-service.txt). Needs py-spy and the right to
    attach to the process (root, or ptrace allowed)."""
    import shutil
    import subprocess
    import threading

    from servelab.bench import experiments as ex
    from servelab.bench.servers.lifecycle import served

    spy = shutil.which("py-spy")
    if spy is None:
        raise CannotRun("py-spy is not installed here (it comes with the lease's first call)")
    out_file = run.dir / "py-spy-service.txt"
    with served("fastapi", engine="torch", log_path=run.dir / "fastapi-profiled.log", max_batch=SERVED_MAX_BATCH,
                env=env) as srv:
        load = threading.Thread(target=lambda: ex.measure(run, "gpu-profile-load", srv, payload="tensor", batch=1,
                                                          concurrency=concurrency, opts=opts), daemon=True)
        load.start()
        time.sleep(min(5.0, seconds / 3))  # past the warm-up
        done = subprocess.run([spy, "record", "--pid", str(srv.pid), "--duration", str(int(seconds)), "--rate",
                               str(rate_hz), "--format", "raw", "--native", "--threads", "--nonblocking",
                               "--output", str(out_file)], capture_output=True, text=True, timeout=seconds + 60)
        load.join(timeout=300)
    if done.returncode != 0 or not out_file.exists():
        raise CannotRun(f"py-spy failed: {(done.stderr or done.stdout).strip()[:300]}")
    top = top_frames(out_file.read_text())
    return [run.record("gpu-profile", kind="profile", server="fastapi", engine="torch", payload="tensor", batch=1,
                       concurrency=concurrency, top_frames=top, profile_file=out_file.name, rate_hz=rate_hz,
                       profiled_s=seconds, note="py-spy samples of the loaded service: functions by own samples")]


def precision_parity(run: Run, *, device: str = "cuda", n: int = 32) -> list[dict]:
    """fp16 and bf16 against fp32 on the lab's photos: the cosine of each photo's two embeddings (min, mean)."""
    from servelab.bench.load.inputs import sample_tensor
    from servelab.config import Settings
    from servelab.model.engines import make_embedder
    from servelab.model.export import cosine_rows

    x = sample_tensor(n)
    settings = Settings.from_env()
    ref = make_embedder(settings, engine="torch", provider=device, precision="fp32").embed(x)
    out = []
    for precision in ("fp16", "bf16"):
        got = make_embedder(settings, engine="torch", provider=device, precision=precision).embed(x)
        cos = cosine_rows(ref, got)
        out.append(run.record("gpu-precision", kind="derived", server="in-process", engine="torch", provider=device,
                              precision=precision, batch=n, value=round(float(cos.min()), 6),
                              value_mean=round(float(cos.mean()), 6), threshold=0.999,
                              met=bool(cos.min() >= 0.999),
                              note=f"cosine of {precision} vs fp32 embeddings, {n} lab photos (min; mean in value_mean)"))
    return out


def decode(run: Run, *, n: int = 256, window_s: float = 0.5, windows: int = 5) -> list[dict]:
    """JPEG -> [N, 3, 224, 224] on the GPU (one batched nvJPEG call) and on the CPU (PIL, a thread per core)."""
    from concurrent.futures import ThreadPoolExecutor

    import torch

    from servelab.bench.load.inputs import sample_jpegs
    from servelab.model.gpu_decode import preprocess_jpegs
    from servelab.model.preprocess import preprocess_bytes

    jpegs = list(sample_jpegs(n))
    out = []
    rates = _windows(lambda: preprocess_jpegs(jpegs, device="cuda"), n, window_s=window_s, windows=windows,
                     sync=torch.cuda.synchronize)
    out.append(_decode_record(run, "gpu (nvJPEG, batched)", n, rates))
    cores = usable_cores()
    with ThreadPoolExecutor(cores) as pool:
        rates = _windows(lambda: list(pool.map(preprocess_bytes, jpegs)), n, window_s=window_s, windows=windows,
                         sync=lambda: None)
    out.append(_decode_record(run, f"cpu (PIL, {cores} threads)", n, rates))
    return out


def _decode_record(run: Run, where: str, n: int, rates: list[float]) -> dict:
    return run.record("gpu-decode", kind="raw", server="in-process", backend=where, engine=None, payload="jpeg",
                      batch=n, concurrency=1, **_rate_fields(rates, n),
                      note=f"JPEG decode + resize + normalise of {n} lab photos (640×480), {where}")


class GpuMeter:
    """Meter for the load generator: the GPU's mean utilisation (NVML, every 50 ms) and its memory in use."""

    def __init__(self, index: int = 0):
        from servelab.fingerprint import nvml

        self.nvml, self.handle = nvml(), None  # no NVML (no NVIDIA driver, or nvidia-ml-py): the fields stay null
        if self.nvml is not None:
            try:
                self.handle = self.nvml.nvmlDeviceGetHandleByIndex(index)
            except Exception:  # no GPU at that index
                self.nvml = None

    def start(self) -> None:
        import threading

        self._samples, self._stop = [], threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True, name="gpu-meter")
        self._thread.start()

    def _sample(self) -> None:
        while self.nvml is not None and not self._stop.wait(0.05):
            self._samples.append(self.nvml.nvmlDeviceGetUtilizationRates(self.handle).gpu)

    def stop(self) -> dict:
        self._stop.set()
        self._thread.join()
        if self.nvml is None:
            return {"gpu_util_pct": None, "gpu_mem_used_mb": None}
        used = self.nvml.nvmlDeviceGetMemoryInfo(self.handle).used / 2**20
        return {"gpu_util_pct": round(float(np.mean(self._samples)), 1) if self._samples else None,
                "gpu_mem_used_mb": round(used)}


def served_sweep(run: Run, server: str, *, engine: str, payloads=("tensor", "jpeg"), concurrencies=CONCURRENCIES,
                 opts=None, experiment: str = "gpu-served", fields: dict | None = None, described=None,
                 **serve_kw) -> list[dict]:
    """Batch-1 requests from 1 … 128 clients against `server` on the GPU, per payload; `fields` join every record,
    and so do those `described(srv)` gives once the server is up (what its /info says, say)."""
    from servelab.bench import experiments as ex
    from servelab.bench.load.cpu import CpuMeter
    from servelab.bench.servers.lifecycle import served

    out = []
    log = run.dir / f"{server}-gpu.log"
    with served(server, engine=engine, log_path=log, max_batch=SERVED_MAX_BATCH, **serve_kw) as srv:
        fields = {**(fields or {}), **(described(srv) if described else {})}
        for payload in payloads:
            for c in concurrencies:
                meters = (CpuMeter(server_pid=srv.pid), GpuMeter())
                out.append(ex.measure(run, experiment, srv, payload=payload, batch=1, concurrency=c, opts=opts,
                                      meters=meters, **fields))
    return out


DECODES = ("device", "cpu")  # Settings.decode: batched nvJPEG in the engine, or PIL in the decode pool
WORKERS = (1, 4)  # the service's frontend processes (SERVELAB_WORKERS), each with its own engine on the one GPU


def decode_sweep(run: Run, *, engine: str = "torch", env: dict | None = None, decodes=DECODES, workers=WORKERS,
                 concurrencies=(128,), opts=None, time_left=lambda: 1e9, start_s: float = 45.0,
                 experiment: str = "gpu-served-decode") -> list[dict]:
    """JPEG-in against the FastAPI service with the decode on the device and on the CPU, with 1 and 4 frontend
    processes: each record names its `decode` setting, the place /info said was in force, and its `workers`. A
    configuration that does not start leaves an `unavailable` record; one that would not finish within
    `time_left()` (about `start_s` to start and measure) is not begun, and says so."""
    out = []
    for decode in decodes:
        for n in workers:
            label = {"decode": decode, "workers": n}
            if time_left() < start_s:
                out.append(run.record(experiment, kind="unavailable", server="fastapi", available=False, **label,
                                      note=f"decode {decode}, {n} workers: not begun, the stage's budget is spent"))
                continue
            try:
                got = served_sweep(run, "fastapi", engine=engine, payloads=("jpeg",), concurrencies=concurrencies,
                                   opts=opts, experiment=experiment,
                                   fields={**label, "note": f"JPEG-in, decode setting {decode}, {n} frontend "
                                                            f"process(es)"},
                                   env={**(env or {}), "SERVELAB_DECODE": decode, "SERVELAB_WORKERS": n},
                                   described=lambda srv: {"decode_in_force": decode_in_force(srv.url)})
            except Exception as exc:  # the records so far stay; this configuration's error is recorded
                out.append(run.record(experiment, kind="unavailable", server="fastapi", available=False, **label,
                                      note=f"decode {decode}, {n} workers: {type(exc).__name__}: {exc}"[:600]))
                continue
            out.extend(got)
    return out


def decode_in_force(url: str) -> str | None:
    """Where the service at `url` decodes JPEG files, as its /info says (None: a service that does not say)."""
    import httpx

    return (httpx.get(url.rstrip("/") + "/info", timeout=10).json().get("decode") or {}).get("in_force")


def perf_analyzer_sweep(run: Run, *, engine: str = "torch", device: str = "cuda", precision: str | None = None,
                        concurrencies=CONCURRENCIES, experiment: str = "gpu-perf-analyzer",
                        request_count: int | None = None) -> list[dict]:
    """NVIDIA's perf_analyzer (C++, the client that can offer what a Python one cannot) against the embedded
    tritonserver's encoder on `device`: batch-1 requests of random data over HTTP, one point per concurrency, each
    measured until perf_analyzer's own windows agree; windows that never agree fall back to one count of requests
    (`perf_analyzer.measure`; params.counted says so). `request_count`: that fixed count (three windows of that
    many requests, `perf_analyzer.fixed_count`) from the start, which always completes however busy the machine
    (checking that the stage runs, not a result)."""
    from urllib.parse import urlsplit

    from servelab.bench.servers.lifecycle import served
    from servelab.triton import perf_analyzer as pa

    binary = pa.find()
    if binary is None:
        raise CannotRun("perf_analyzer is not here (the lease's first call brings it; elsewhere "
                        "`servelab triton get-perf-analyzer`)")
    out = []
    with served("triton-http", engine=engine, log_path=run.dir / "triton-perf-analyzer.log", max_batch=SERVED_MAX_BATCH,
                device=device, precision=precision) as srv:
        address = urlsplit(srv.http_url).netloc
        for c in concurrencies:
            csv = run.dir / f"perf-analyzer-c{c}.csv"
            # its windows on a busy machine may never settle: then one fixed count of requests, said in the record
            cmd = pa.command(binary, address, srv.model, concurrency=c, requests=max(64, 4 * c), csv=csv)
            (res,) = pa.measure(pa.fixed_count(cmd, request_count) if request_count else cmd, csv,
                                fallback_requests=request_count or max(64, 4 * c), timeout=180)
            counted = request_count or res.counted
            out.append(run.record(experiment, kind="load", server="triton-http", engine=engine, provider=device,
                                  protocol="http", payload="tensor", batch=1, concurrency=c, precision=precision,
                                  throughput_img_s=round(res.throughput_img_s, 1), latency_p50_ms=round(res.latency_p50_ms, 3),
                                  latency_p99_ms=round(res.latency_p99_ms, 3),
                                  server_stats={"queue_ms": res.server_queue_ms, "compute_ms": res.server_compute_ms},
                                  params={"client": "perf_analyzer", "binary": str(binary), "counted": counted},
                                  quick=counted is not None,
                                  note="perf_analyzer, batch-1 random tensors over HTTP ("
                                       + ("its own stability windows)" if counted is None
                                          else f"three windows of {counted} requests as they came: not a result)")))
    return out


def _on_gpu(engine: str, precision: str) -> tuple:
    """(settings, env) for a stage's engines: the Settings this process's in-process engines are built with, and
    the same choice as the variables a server it starts reads."""
    from servelab.config import Settings

    settings = Settings.from_env(engine=engine, provider="cuda", precision=precision)
    env = {"SERVELAB_ENGINE": engine, "SERVELAB_PROVIDER": "cuda", "SERVELAB_PRECISION": precision}
    return settings, env


def run_stage(run: Run, stage: str, *, budget_s: float = 240.0) -> list[dict]:
    """One stage of the reference run (see the module docstring), within about `budget_s` seconds. A step that
    fails leaves an `unavailable` record with its error, and the stage goes on with the next."""
    from servelab.bench import experiments as ex
    from servelab.bench.load.options import GPU_LOAD, LoadOpts

    if stage not in STAGES:
        raise InvalidValue(f"stage must be one of {', '.join(STAGES)}, got {stage!r}")
    deadline = time.monotonic() + budget_s
    opts = LoadOpts(**GPU_LOAD)
    out: list[dict] = []

    def step(name: str, fn) -> None:
        if time.monotonic() > deadline:  # a later step of a stage whose budget is spent: said, not begun
            out.append(run.record(f"gpu-{stage}", kind="unavailable", server="in-process", available=False,
                                  note=f"{name}: not begun, the stage's {budget_s:.0f} s budget is spent"))
            return
        t0 = time.perf_counter()
        try:
            out.extend(fn())
        except Exception as exc:  # the records so far stay; the error is recorded, not raised
            out.append(run.record(f"gpu-{stage}", kind="unavailable", server="in-process", available=False,
                                  note=f"{name}: {type(exc).__name__}: {exc}"[:600]))
        print(f"gpu-reference {stage}: {name} took {time.perf_counter() - t0:.0f} s", flush=True)

    if stage == "raw":
        step("device-resident sweep", lambda: device_resident(run))
        best = best_precision(out)
        step("precision parity", lambda: precision_parity(run))
        step("GPU JPEG decode", lambda: decode(run))
        settings, _ = _on_gpu("torch", best)
        step("host-fed engine", lambda: ex.raw_engines(run, engines=("torch",), providers=("cuda",),
                                                       batches=(1, 64, 256), opts=opts, experiment="gpu-raw-host",
                                                       settings=settings))
        step("host copies", lambda: host_copies(run, best))
        step("CUDA graphs and torch.compile",
             lambda: launch_variants(run, best, time_left=lambda: deadline - time.monotonic()))
    elif stage == "service":
        _, on_gpu = _on_gpu("torch", best_precision(run.records))
        decode = {**on_gpu, "SERVELAB_DECODE_THREADS": max(1, usable_cores() // 2)}
        # first, while the budget is whole: JPEG-in decoded by batched nvJPEG in the engine against the decode pool,
        # with 1 and 4 frontend processes (the full sweep below then runs with the decode the service chooses)
        step("FastAPI service, decode on the device vs the CPU, 1 and 4 processes",
             lambda: decode_sweep(run, env=decode, opts=opts, time_left=lambda: deadline - time.monotonic()))
        step("FastAPI service", lambda: served_sweep(run, "fastapi", engine="torch", opts=opts, env=decode,
                                                     described=lambda srv: {"decode_in_force": decode_in_force(srv.url)}))
        # the torch engine on cuda now takes 2 CPU threads (the first lease's service took one per core and burnt
        # 3-10 of them while the GPU idled): the sweeps above run after that fix, this one as before it
        step("FastAPI service, a torch thread per core (before the thread fix)", lambda: served_sweep(
            run, "fastapi", engine="torch", opts=opts, concurrencies=(1, 128), experiment="gpu-served-all-threads",
            env={**decode, "SERVELAB_THREADS": usable_cores()}, fields={"threads": usable_cores()}))
    elif stage == "ceiling":
        step("nvJPEG into a CUDA graph", lambda: jpeg_ceiling(run, best_precision(run.records)))
    elif stage == "profile":
        _, on_gpu = _on_gpu("torch", best_precision(run.records))
        step("py-spy on the loaded service", lambda: profile_service(run, opts=opts, env=on_gpu))
    else:  # triton: ONNX Runtime's CUDA provider, in-process and behind the embedded tritonserver
        settings, _ = _on_gpu("onnx", Precision.FP32)
        step("ONNX Runtime CUDA engine", lambda: ex.raw_engines(run, engines=("onnx",), providers=("cuda",),
                                                                batches=(1, 64, 256), opts=opts,
                                                                experiment="gpu-raw-host", settings=settings))
        step("Triton", lambda: served_sweep(run, "triton-grpc", engine="onnx", opts=opts, device="cuda"))
        # without onnxruntime-gpu (the two-call lease carries none), the machine's CUDA torch in the same encoder
        step("Triton, torch engine", lambda: served_sweep(run, "triton-grpc", engine="torch", opts=opts, device="cuda",
                                                          precision=best_precision(run.records),
                                                          experiment="gpu-served-triton-torch"))
        step("perf_analyzer against Triton, torch engine",
             lambda: perf_analyzer_sweep(run, precision=best_precision(run.records)))
    return out
