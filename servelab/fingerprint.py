"""What a number was measured on: one environment fingerprint for benchmark runs, lab runs and the dedup bench.

A figure without its machine cannot be compared with anything, so every record set carries this dict:
CPU model and cores (logical, physical, usable by this process), memory, GPUs (through NVML when the
NVIDIA driver and nvidia-ml-py are there), OS, package versions, git commit, model weights and load.
"""

from __future__ import annotations

import datetime as _dt
import functools
import os
import platform
import subprocess
from pathlib import Path

PACKAGES = ("numpy", "onnxruntime", "onnxruntime-gpu", "torch", "tritonclient", "nvidia-pytriton", "fastapi",
            "uvicorn", "litserve", "httpx", "pillow")


def nvml():
    """The initialised pynvml module, or None where there is no NVIDIA driver (or no nvidia-ml-py)."""
    try:
        import pynvml  # nvidia-ml-py

        pynvml.nvmlInit()
        return pynvml
    except Exception:
        return None


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def versions() -> dict:
    """Python and the installed versions of the packages that shape the numbers (absent ones left out)."""
    from importlib import metadata

    out = {"python": platform.python_version()}
    for dist in PACKAGES:
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return out


def git_sha() -> str | None:
    """Commit of the checkout this package runs from ("-dirty" with uncommitted changes); None when installed
    outside a checkout or git is missing."""
    here = Path(__file__).resolve().parent
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5)
        if sha.returncode != 0:
            return None
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                               capture_output=True, text=True, timeout=5)
        return sha.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.TimeoutExpired):
        return None


def gpus() -> tuple[list[dict], str | None]:
    """([{name, driver, memory_mb}, …], note): the note says why the list is empty when NVML is missing."""
    nv = nvml()
    if nv is None:
        return [], "nvidia-ml-py not importable or no NVIDIA driver: no GPU figures"
    try:
        driver = nv.nvmlSystemGetDriverVersion()
        out = []
        for i in range(nv.nvmlDeviceGetCount()):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            out.append({"name": nv.nvmlDeviceGetName(h), "driver": driver,
                        "memory_mb": round(nv.nvmlDeviceGetMemoryInfo(h).total / 2**20)})
        return out, None
    except Exception as exc:
        return [{"error": str(exc)}], None


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity: a container's cpuset, `taskset`), else all of them."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


@functools.cache
def machine() -> dict:
    """This machine in a few fields, for saying which machine served a measurement: a server reports it about
    itself (the service's /info), a client about the servers it started (servelab.bench.servers)."""
    gpu_list, _ = gpus()
    return {"hostname": platform.node(), "cpu_model": cpu_model(),
            "cpu_usable": usable_cores(),
            "gpus": [g["name"] for g in gpu_list if g.get("name")], **standin()}


def standin(settings=None) -> dict:
    """{"standin": what} inside an image built on a stand-in base (scripts/standin_images.sh sets SERVELAB_STANDIN
    in the base, every image built on it inherits it), else {}: the rehearsal's rows say they ran on stand-ins.
    `settings`: servelab.config.Settings (default: from the environment)."""
    from servelab.config import Settings

    what = (settings or Settings.from_env()).standin
    return {"standin": what} if what else {}


def machine_label(m: dict) -> str:
    """'node1: Intel Xeon … · 2 cores · NVIDIA A100' from `machine()`'s fields."""
    gpu = ", ".join(m.get("gpus") or []) or "no GPU"
    label = f"{m.get('hostname') or '?'}: {m.get('cpu_model') or '?'} · {m.get('cpu_usable') or '?'} cores · {gpu}"
    return label + (" · stand-in image" if m.get("standin") else "")


def environment_fingerprint(weights: str) -> dict:
    """The fingerprint dict; `weights` labels the weights measured (servelab.model.weights.weights_label: the
    caller asks the model, so this ground-floor module never imports it)."""
    import psutil

    gpu_list, gpu_note = gpus()
    return {
        "cpu_model": cpu_model(),
        "cpu_logical": os.cpu_count(),
        "cpu_physical": psutil.cpu_count(logical=False),
        "cpu_usable": usable_cores(),
        "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "gpus": gpu_list,
        "gpu_note": gpu_note,
        "os": platform.platform(),
        "versions": versions(),
        "git_sha": git_sha(),
        "weights": weights,
        "load_average": [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None,
        "captured": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        **standin(),
    }
