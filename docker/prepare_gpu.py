"""One-shot step on a GPU node (docker/compose.00-prepare.yaml): export the ONNX model, stage models/ for Triton.

Runs inside the servelab GPU image with the repository clone bind-mounted at /opt/servelab, so the export lands
in artifacts/ and the live Triton repository in models/ of the clone, owned by the node user (compose sets
`user:`). Knobs from the environment:
  SERVELAB_INSTANCES         encoder instances per GPU that Triton sees (default 1)
  SERVELAB_TRITON_MAX_BATCH  max_batch_size of the GPU models (default: the template's)
  SERVELAB_TRITON_FLAVOUR    which repository to stage: gpu (default; NVIDIA's Triton with the onnxruntime
                             backend) or cpu (the python-backend set: the node rehearsal's stand-in Triton)
No GPU ids are staged: Triton puts the instances on every GPU its container sees, which is exactly what the
Triton stack reserves, so the two cannot disagree. Paths written into the configs are the ones the Triton
container sees: /trt_cache (named volume) and /opt/servelab (the servelab package, bind-mounted read-only for
the preprocess_jpeg python model).
"""

from __future__ import annotations

import os
import sys


def main() -> int:
    from servelab.config import Settings
    from servelab.model.export import ensure_exported
    from servelab.triton.repository import stage

    instances = int(os.environ.get("SERVELAB_INSTANCES") or "1")
    max_batch = int(os.environ["SERVELAB_TRITON_MAX_BATCH"]) if os.environ.get("SERVELAB_TRITON_MAX_BATCH") else None
    flavour = os.environ.get("SERVELAB_TRITON_FLAVOUR") or "gpu"
    settings = Settings.from_env()
    meta = ensure_exported(settings, log_fn=print)
    print(f"prepare: export {meta['path']} (weights: {meta['weights']})")
    info = stage(flavour, instances=instances, max_batch=max_batch, trt_cache="/trt_cache",
                 servelab_path="/opt/servelab", settings=settings, log_fn=print)
    print(f"prepare: staged the {flavour} repository: {', '.join(info['models'])} ({instances} instance(s) per device) "
          f"in {info['repository']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
