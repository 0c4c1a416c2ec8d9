"""Container entrypoint check: refuse to start a service that would export (and maybe download) at run time.

The service exports the ONNX model on first use when none matches the configured weights; inside a container
that means a minute of CPU, torch in the image, and — with SERVELAB_PRETRAINED — a download from a model hub.
Here that only happens when SERVELAB_EXPORT_ON_START=1 says so. Otherwise the export must be mounted at
SERVELAB_ARTIFACTS (/models) or baked in with `--build-arg EXPORT_AT_BUILD=1`.
A GPU provider (SERVELAB_PROVIDER=cuda or tensorrt) in a container that sees no GPU is refused here too, in one
line, instead of a service that starts, fails to build its engine and answers 500s.
Exit codes: 0 ready to start, 2 configuration problem (one line on stderr says what to fix).
"""

from __future__ import annotations

import importlib.util
import os
import sys


def gpu_visible() -> bool:
    """Whether this container can use an NVIDIA GPU: the driver's library loads and counts at least one device
    (the NVIDIA container runtime mounts both only when the container was given a GPU)."""
    import ctypes

    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    count = ctypes.c_int(0)
    return cuda.cuInit(0) == 0 and cuda.cuDeviceGetCount(ctypes.byref(count)) == 0 and count.value > 0


def check() -> str | None:
    from servelab.config import Settings
    from servelab.model.export import load_metadata
    from servelab.model.weights import weights_label

    settings = Settings.from_env()
    if settings.provider != "cpu" and not gpu_visible():
        return (f"SERVELAB_PROVIDER={settings.provider} but this container sees no GPU: run it with a GPU "
                "(docker run --gpus all, or the stack's device reservation) or set SERVELAB_PROVIDER=cpu")
    if settings.engine == "torch":
        if importlib.util.find_spec("torch") is None:
            return "SERVELAB_ENGINE=torch needs torch, which this image does not have: use docker/Dockerfile.gpu or engine onnx"
        if settings.pretrained and os.environ.get("SERVELAB_EXPORT_ON_START") != "1":
            return "SERVELAB_PRETRAINED with engine torch downloads weights at start: set SERVELAB_EXPORT_ON_START=1 to allow it"
        return None
    if os.environ.get("SERVELAB_EXPORT_ON_START") == "1":
        return None
    meta = load_metadata(settings)
    want = weights_label(settings)
    if meta is None:
        return (f"no ONNX export in {settings.artifacts}: mount one (`servelab export` on the host, then "
                f"-v $PWD/artifacts:{settings.artifacts}:ro), build with --build-arg EXPORT_AT_BUILD=1, "
                "or set SERVELAB_EXPORT_ON_START=1 to export at start")
    if meta.get("weights") != want or "int8" not in meta:
        return (f"the export in {settings.artifacts} is for {meta.get('weights')!r}, settings ask for {want!r}: "
                "re-export on the host or set SERVELAB_EXPORT_ON_START=1")
    return None


def main() -> int:
    try:
        problem = check()
    except ValueError as exc:  # invalid SERVELAB_* value
        problem = str(exc)
    if problem:
        print(f"servelab preflight: {problem}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
