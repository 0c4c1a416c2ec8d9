"""Triton python-backend model: an emulated accelerator standing in for the image tower (engine `emulated`).

Each execution holds one emulated device for the profile's t(B), B the size of the dynamic batch, without using
the CPU (servelab.model.emulated_engine), so dynamic batching, instance counts and queue delays behave as they
would in front of a GPU. Instance k runs on emulated device k mod the device count; instances on one device
share it as kernels share a GPU. The answer is a deterministic stand-in vector, not an image embedding.

The same file serves the uint8 variant (`openclip_vit_b32_emulated_uint8`, written by stage): it takes the input
its config declares, and uint8 pixels are normalised into the batch before the device sees it
(servelab.triton.python_batch, which says why a variant).
"""

import json
import os
import re
import sys

import triton_python_backend_utils as pb_utils

INPUT = "pixel_values"
PIXELS = "pixels_uint8"
OUTPUT = "embedding"


def _import_servelab(extra_path):
    """servelab from `extra_path` (the tree that staged this repository) when given, else the environment's."""
    if extra_path and extra_path not in sys.path:
        sys.path.insert(0, extra_path)
    import servelab  # noqa: F401


def instance_index(instance_name):
    """Triton names CPU instances <group>_<k>; k picks the emulated device."""
    match = re.search(r"_(\d+)$", instance_name or "")
    return int(match.group(1)) if match else 0


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        params = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        _import_servelab(params.get("servelab_path"))
        from servelab.config import Settings
        from servelab.model.emulated_engine import EmulatedEmbedder
        from servelab.triton import python_batch

        self.batching = python_batch
        self.input_name = config["input"][0]["name"]  # INPUT, or PIXELS in the uint8 variant

        device_profile = params["device_profile"]
        if device_profile.endswith(".json") and not os.path.isabs(device_profile):
            # a profile file staged into this model's folder (servelab.triton.repository)
            device_profile = os.path.join(args["model_repository"], device_profile)
        changes = {"device_profile": device_profile,
                   "emulated_devices": int(params.get("emulated_devices") or 0)}
        if params.get("device_dir"):
            changes["device_dir"] = params["device_dir"]
        self.embedder = EmulatedEmbedder(Settings().with_(**changes),
                                         device=instance_index(args.get("model_instance_name")))

    def execute(self, requests):
        arrays = self.batching.request_arrays(requests, self.input_name, pb_utils)
        out = self.embedder.embed(self.batching.float_batch(arrays))
        return self.batching.responses(arrays, out, pb_utils)

    def finalize(self):
        self.embedder = None
