"""One-shot step on a GPU node (docker/compose.00-prepare.yaml): export the ONNX model, stage models/ for Triton.

Runs inside the servelab GPU image with the repository clone bind-mounted at /opt/servelab, so the export lands
in artifacts/ and the live Triton repository in models/ of the clone, owned by the node user (compose sets
`user:`). Knobs from the environment:
  SERVELAB_GPUS       comma-separated GPU ids for the encoders' instance_group (default: every visible GPU)
  SERVELAB_INSTANCES  instances per listed GPU (default 1)
  SERVELAB_TRITON_MAX_BATCH  max_batch_size of the GPU models (default: the template's)
Paths written into the configs are the ones the Triton container sees: /trt_cache (named volume) and
/opt/servelab (the servelab package, bind-mounted read-only for the preprocess_jpeg python model).
"""

from __future__ import annotations

import os
import sys


def visible_gpus() -> list[int]:
    try:
        import torch

        n = torch.cuda.device_count()
    except Exception:  # noqa: BLE001 - no torch / no driver: fall back to GPU 0 and say so
        n = 0
    if n == 0:
        print("prepare: no GPU visible here; staging for GPU 0", file=sys.stderr)
        return [0]
    return list(range(n))


def main() -> int:
    from servelab.config import Settings
    from servelab.model.export import ensure_exported
    from servelab.triton.repository import stage

    raw = os.environ.get("SERVELAB_GPUS", "").strip()
    gpus = [int(g) for g in raw.split(",") if g.strip()] if raw else visible_gpus()
    instances = int(os.environ.get("SERVELAB_INSTANCES", "1"))
    max_batch = int(os.environ["SERVELAB_TRITON_MAX_BATCH"]) if os.environ.get("SERVELAB_TRITON_MAX_BATCH") else None
    settings = Settings.from_env()
    meta = ensure_exported(settings, log_fn=print)
    print(f"prepare: export {meta['path']} (weights: {meta['weights']})")
    info = stage(target="gpu", instances=instances, gpus=gpus, max_batch=max_batch, trt_cache="/trt_cache",
                 servelab_path="/opt/servelab", settings=settings, log_fn=print)
    print(f"prepare: staged {', '.join(info['models'])} for GPUs {gpus} x{instances} in {info['repository']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
