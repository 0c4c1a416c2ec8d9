"""Triton python-backend model: the exported OpenCLIP ViT-B/32 ONNX graph run by onnxruntime, on the CPU or
(parameter `provider` "cuda", instance_group KIND_GPU) on the GPU Triton placed the instance on. With parameter
`engine` "torch", servelab's torch engine runs instead (precision from `precision`), for a GPU machine whose
torch has CUDA but which has no onnxruntime-gpu.

The bundled tritonserver has only the python backend, so this file stands in for the onnxruntime backend
on the laptop and on a pip-only GPU machine. Triton's dynamic batcher hands `execute` several requests at
once; they are filled into one float32 batch for one onnxruntime run (that is where batching pays), and split
back per request. The same file serves the uint8 variant (`openclip_vit_b32_cpu_uint8`, written by stage): it
takes the input its config declares, and uint8 pixels (the crop before normalisation, a quarter of the bytes) are
normalised into the batch here (servelab.triton.python_batch, imported from `servelab_path`, says why a variant).
"""

import json
import os

import triton_python_backend_utils as pb_utils

INPUT = "pixel_values"
PIXELS = "pixels_uint8"
OUTPUT = "embedding"


def _import_servelab(extra_path):
    """servelab from `extra_path` (the tree that staged this repository) when given, else the environment's."""
    import sys

    if extra_path and extra_path not in sys.path:
        sys.path.insert(0, extra_path)
    import servelab  # noqa: F401


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        params = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        self.embedder = None
        _import_servelab(params.get("servelab_path"))
        from servelab.triton import python_batch

        self.batching = python_batch
        self.request_input = config["input"][0]["name"]  # INPUT, or PIXELS in the uint8 variant
        if (params.get("engine") or "onnx") == "torch":
            self._torch_engine(args, params)
            return
        import onnxruntime as ort

        here = os.path.join(args["model_repository"], args["model_version"])
        path = os.path.join(here, params.get("onnx_file", "model.onnx"))
        if not os.path.exists(path):
            raise pb_utils.TritonModelException(f"ONNX file {path} not found; run `servelab triton stage`")
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        threads = int(params.get("intra_op_threads", "0") or 0)
        if threads > 0:
            so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        # "1" (onnxruntime's default): intra-op threads busy-wait briefly after a run; "0": they sleep at once
        so.add_session_config_entry("session.intra_op.allow_spinning", params.get("intra_op_spinning", "1") or "1")
        provider = params.get("provider", "cpu") or "cpu"
        if provider == "cpu":
            providers = ["CPUExecutionProvider"]
        elif provider == "cuda":
            if hasattr(ort, "preload_dlls"):  # onnxruntime-gpu finds pip's CUDA libraries only once loaded
                ort.preload_dlls()
            device = int(args.get("model_instance_device_id", "0") or 0)
            providers = [("CUDAExecutionProvider", {"device_id": device, "cudnn_conv_algo_search": "HEURISTIC"}),
                         "CPUExecutionProvider"]
        else:
            raise pb_utils.TritonModelException(f"parameter provider must be cpu or cuda, got {provider!r}")
        self.session = ort.InferenceSession(path, sess_options=so, providers=providers)
        wanted = providers[0] if isinstance(providers[0], str) else providers[0][0]
        if self.session.get_providers()[0] != wanted:  # onnxruntime falls back without an error: refuse instead
            raise pb_utils.TritonModelException(
                f"onnxruntime runs this model on {self.session.get_providers()[0]}, not {wanted}: the provider "
                "failed to initialise (see the log above)")
        self.input_name = self.session.get_inputs()[0].name
        self.output_name = self.session.get_outputs()[0].name

    def _torch_engine(self, args, params):
        """servelab's torch engine on this instance's device (servelab imported from `servelab_path`)."""
        from servelab.config import Settings
        from servelab.model.engines import make_embedder

        provider = params.get("provider", "cpu") or "cpu"
        if provider == "cuda":
            import torch

            torch.cuda.set_device(int(args.get("model_instance_device_id", "0") or 0))
        settings = Settings.from_env(engine="torch", provider=provider, precision=params.get("precision") or "fp32")
        self.embedder = make_embedder(settings, engine="torch", provider=provider)

    def execute(self, requests):
        arrays = self.batching.request_arrays(requests, self.request_input, pb_utils)
        batch = self.batching.float_batch(arrays)
        if self.embedder is not None:
            out = self.embedder.embed(batch)
        else:
            out = self.session.run([self.output_name], {self.input_name: batch})[0]
        return self.batching.responses(arrays, out, pb_utils)

    def finalize(self):
        self.session = self.embedder = None
