"""One-shot step on a GPU node (docker/compose.00-prepare.yaml): export the ONNX model, stage models/ for Triton.

Runs inside the servelab GPU image with the repository clone bind-mounted at /opt/servelab, so the export lands
in artifacts/ and the live Triton repository in models/ of the clone, owned by the node user (compose sets
`user:`). Knobs from the environment:
  SERVELAB_INSTANCES         encoder instances per GPU that Triton sees (default 1)
  SERVELAB_LAB_PROFILE       the lab profile the node's stacks must admit (default gpu): its largest batch and
                             client count set the service's limits, which this step writes into docker/.env for
                             every stack, and Triton's max_batch_size (servelab.lab.params.stack_limits)
  SERVELAB_TRITON_MAX_BATCH  max_batch_size of the GPU models (default: the profile's, at least the template's)
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
from pathlib import Path

ENV_FILE = Path(__file__).resolve().parent / ".env"  # docker/.env: compose reads it for every file in docker/


def write_limits(env_file: Path, limits: dict[str, str]) -> None:
    """Set the stacks' limits in docker/.env, keeping every other line (the weights, Triton's key, the token), the
    file this user's alone."""
    keep = [line for line in (env_file.read_text().splitlines() if env_file.exists() else [])
            if line.split("=", 1)[0] not in limits]
    text = "\n".join(keep + [f"{k}={v}" for k, v in limits.items()]) + "\n"
    tmp = env_file.with_name(env_file.name + ".limits")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, env_file)


def main() -> int:
    from servelab.config import Settings
    from servelab.lab.params import stack_limits
    from servelab.model.export import ensure_exported
    from servelab.triton.repository import stage

    instances = int(os.environ.get("SERVELAB_INSTANCES") or "1")
    lab_profile = os.environ.get("SERVELAB_LAB_PROFILE") or "gpu"
    limits = stack_limits(lab_profile)
    max_batch = int(os.environ.get("SERVELAB_TRITON_MAX_BATCH") or limits.triton_max_batch)
    write_limits(ENV_FILE, limits.service_env())
    print(f"prepare: the service admits lab profile {lab_profile} (docker/.env): "
          f"{' '.join(f'{k}={v}' for k, v in limits.service_env().items())}; Triton's max_batch_size {max_batch}")
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
