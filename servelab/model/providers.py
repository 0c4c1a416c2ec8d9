"""Which execution provider a session gets, and whether it can run here: decided by a working session.

    ort_providers("cuda")            # the list for onnxruntime.InferenceSession(..., providers=…)
    check = provider_check("cuda")   # a tiny session on CUDA, run once
    check.usable, check.reason       # False, "ONNX Runtime runs this session on CPUExecutionProvider, not …"

`onnxruntime.get_available_providers()` describes the build, not the machine: onnxruntime-gpu lists CUDA and
TensorRT on a box with no GPU, no driver or no TensorRT, and a session whose provider fails to initialise
runs on the next provider in the list without an error. Only a session that was created, kept the provider
asked for, and ran tells the truth.

onnxruntime-gpu's CUDA and TensorRT providers carry no RUNPATH to the CUDA libraries pip installs: they are
found only if something loaded them first (importing CUDA torch does). `ort_providers` loads them
(`onnxruntime.preload_dlls`) before it hands out a GPU provider list, so no session depends on import order.
"""

from __future__ import annotations

import base64
import ctypes
import functools
import importlib.util
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from servelab.errors import ServelabError


class EngineError(ServelabError, RuntimeError):
    pass


# HEURISTIC: ONNX Runtime's default (EXHAUSTIVE) benchmarks cuDNN algorithms again for every new input shape,
# i.e. on the first request of each batch size, inside a measured latency.
CUDA_OPTIONS = {"cudnn_conv_algo_search": "HEURISTIC"}
# The TensorRT runtime onnxruntime-gpu's TensorRT provider links against (TensorRT 10).
TENSORRT_LIBRARY = "nvinfer_10.dll" if sys.platform == "win32" else "libnvinfer.so.10"


@functools.cache  # once per process: preload_dlls prints a line per library it cannot find
def preload_gpu_libraries() -> None:
    """Load the CUDA and cuDNN libraries pip installed (nvidia-* wheels) so onnxruntime-gpu's providers find
    them whether or not CUDA torch was imported first. A no-op on onnxruntime builds without CUDA, and on
    releases before 1.21 (no `preload_dlls`)."""
    import onnxruntime as ort

    preload = getattr(ort, "preload_dlls", None)
    if preload is not None:
        preload()


def tensorrt_library() -> str | None:
    """TensorRT's runtime library, loaded for onnxruntime: from the `tensorrt_libs` wheel (pip's TensorRT) or the
    system's library path. None: this machine has no TensorRT."""
    spec = importlib.util.find_spec("tensorrt_libs")
    candidates = [str(Path(d) / TENSORRT_LIBRARY) for d in (spec.submodule_search_locations or [])] if spec else []
    for candidate in [c for c in candidates if Path(c).exists()] + [TENSORRT_LIBRARY]:
        try:
            ctypes.CDLL(candidate, mode=getattr(ctypes, "RTLD_GLOBAL", 0))
        except OSError:
            continue
        return candidate
    return None


def ort_providers(provider: str, cache_dir: Path | None = None, model_sha256: str = "") -> list:
    """Execution-provider list for onnxruntime, most specific first. GPU lists come with CUDA's libraries
    loaded; TensorRT only where TensorRT is installed (checked before its cache folder is made). TensorRT
    engines are cached per model (a folder named after `model_sha256`), so an export with other weights never
    runs an old engine."""
    if provider == "cpu":
        return ["CPUExecutionProvider"]
    if provider not in ("cuda", "tensorrt"):
        raise EngineError(f"unknown provider {provider!r} (cpu, cuda, tensorrt)")
    preload_gpu_libraries()
    if provider == "cuda":
        return [("CUDAExecutionProvider", CUDA_OPTIONS), "CPUExecutionProvider"]
    if tensorrt_library() is None:
        raise EngineError(f"no TensorRT in this image: ONNX Runtime's TensorRT provider needs TensorRT 10's runtime "
                          f"({TENSORRT_LIBRARY}), found neither as a Python package nor on the library path; "
                          "choose provider cuda, or run where TensorRT is installed")
    trt = tensorrt_options(cache_dir, model_sha256)
    engines = Path(trt["trt_engine_cache_path"])
    try:
        engines.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise EngineError(f"the TensorRT engine cache {engines} cannot be created ({type(exc).__name__}: "
                          f"{exc.strerror or exc}): point SERVELAB_TRT_CACHE at a writable folder") from exc
    return [("TensorrtExecutionProvider", trt), ("CUDAExecutionProvider", CUDA_OPTIONS), "CPUExecutionProvider"]


def tensorrt_options(cache_dir: Path | None = None, model_sha256: str = "") -> dict:
    """The TensorRT provider's options (fp16, engine and timing caches; `cache_dir` default: the settings'
    trt_cache); touches nothing on disk."""
    from servelab.config import Settings

    cache = Path(cache_dir or Settings.from_env().trt_cache)
    engines = cache / model_sha256[:16] if model_sha256 else cache
    return {
        "trt_fp16_enable": True,
        "trt_engine_cache_enable": True,
        "trt_engine_cache_path": str(engines),
        "trt_timing_cache_enable": True,
        "trt_timing_cache_path": str(cache),
        "trt_force_sequential_engine_build": True,
    }


def provider_name(entry) -> str:
    return entry if isinstance(entry, str) else entry[0]


def check_active_provider(wanted: str, active: list[str]) -> None:
    """onnxruntime falls back to the next provider in the list without an error (e.g. TensorRT libraries
    missing, CUDA out of memory): a session whose first active provider is not the one asked for is refused,
    so no record says `tensorrt` for a run that was CUDA or CPU."""
    if not active or active[0] != wanted:
        raise EngineError(f"ONNX Runtime runs this session on {', '.join(active) or 'nothing'}, not {wanted}: "
                          "the provider failed to initialise (see onnxruntime's warnings above)")


@dataclass(frozen=True)
class ProviderCheck:
    """The outcome of running a tiny session on one provider: usable, or the engine's own reason why not."""

    provider: str  # cpu | cuda | tensorrt
    usable: bool
    reason: str = ""  # empty when usable


# A 4x4 identity MatMul (opset 17), serialised: MatMul exercises cuBLAS, the library a real model needs first.
# Kept as bytes so the check needs only onnxruntime (the service image has no `onnx`); tests rebuild it.
TINY_MODEL = base64.b64decode(
    "CAgSCHNlcnZlbGFiOpoBChEKAXgKAXcSAXkiBk1hdE11bBIOcHJvdmlkZXJfY2hlY2sqSwgECAQQAUIBd0pAAACAPwAAAAAAAAAAAAAAAAAAAAAA"
    "AIA/AAAAAAAAAAAAAAAAAAAAAAAAgD8AAAAAAAAAAAAAAAAAAAAAAACAP1oTCgF4Eg4KDAgBEggKAggBCgIIBGITCgF5Eg4KDAgBEggKAggBCgII"
    "BEIECgAQEQ=="
)


@functools.cache
def provider_check(provider: str) -> ProviderCheck:
    """Create a session on `provider` for a tiny model, require that provider to be the active one, run it once.
    Cached per process: the answer does not change while the process lives."""
    try:
        import onnxruntime as ort
    except ImportError as exc:
        return ProviderCheck(provider, False, f"onnxruntime is not installed ({exc})")
    scratch = tempfile.mkdtemp(prefix="servelab-provider-check-")  # a TensorRT engine for the tiny model
    try:
        providers = ort_providers(provider, cache_dir=Path(scratch))
        session = ort.InferenceSession(TINY_MODEL, providers=providers)
        check_active_provider(provider_name(providers[0]), session.get_providers())
        x = np.arange(4, dtype=np.float32).reshape(1, 4)
        if not np.allclose(session.run(None, {"x": x})[0], x):
            return ProviderCheck(provider, False, f"{provider} computed a wrong result for the identity MatMul")
    except Exception as exc:  # the engine's own error is the answer
        return ProviderCheck(provider, False, f"{type(exc).__name__}: {exc}"[:400])
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return ProviderCheck(provider, True)


@functools.cache
def torch_cuda_check() -> ProviderCheck:
    """Whether torch can run on CUDA here: a device it sees, and a small computation that completes on it."""
    try:
        import torch
    except ImportError as exc:
        return ProviderCheck("cuda", False, f"torch is not installed ({exc})")
    if not torch.cuda.is_available():
        return ProviderCheck("cuda", False, f"torch {torch.__version__} sees no CUDA device")
    try:
        x = torch.arange(4.0, device="cuda")
        if float((x * 2).sum().cpu()) != 12.0:
            return ProviderCheck("cuda", False, "CUDA computed a wrong result for a 4-element sum")
    except Exception as exc:
        return ProviderCheck("cuda", False, f"{type(exc).__name__}: {exc}"[:400])
    return ProviderCheck("cuda", True)
