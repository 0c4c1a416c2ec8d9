"""The Triton model names: staging writes these folders, and the clients, lab and benchmarks ask for them."""

CPU_ENCODER = "openclip_vit_b32_cpu"  # fp32 ONNX in onnxruntime on the embedded CPU server (python backend)
GPU_ENCODER = "openclip_vit_b32"  # onnxruntime backend, CUDA execution provider, on the GPU node
TRT_ENCODER = "openclip_vit_b32_trt"  # onnxruntime backend, TensorRT execution provider, on the GPU node
EMULATED_ENCODER = "openclip_vit_b32_emulated"  # an emulated accelerator standing in for the encoder (CPU server)
PREPROCESS = "preprocess_jpeg"  # encoded image -> normalised pixels (python backend)
ENSEMBLE = "openclip_vit_b32_jpeg"  # PREPROCESS then the flavour's encoder: what a JPEG payload is sent to

ENCODERS = {"cpu": (CPU_ENCODER, EMULATED_ENCODER), "gpu": (GPU_ENCODER, TRT_ENCODER)}  # per staging flavour

UINT8_SUFFIX = "_uint8"  # a CPU encoder's variant that takes uint8 pixels (servelab.triton.python_batch)


def uint8_model(encoder: str) -> str:
    """The name of `encoder`'s uint8-pixel variant: `servelab triton stage` writes one beside each CPU encoder."""
    return encoder + UINT8_SUFFIX
