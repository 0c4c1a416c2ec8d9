"""The TensorRT execution-provider stanza of an onnxruntime-backend model, in one place: the optimisation
profile staging writes, and the rules both the 05b deployment check and the 05b exercise hold a config to.

    params = accelerator_params(cfg)           # the "tensorrt" accelerator's parameters, None without one
    shapes = profile_shapes("pixel_values", [3, 224, 224], max_batch=64)   # trt_profile_{min,opt,max}_shapes
    rules = stanza_rules(cfg, max_batch=64, cache_path="/trt_cache")        # [Rule], the stanza's own
    rules += deployment_rules(cfg)                                          # what the deployment around it needs

Each Rule is a row (setting, value found, ok, why it matters) and, when it fails, a `hint` that says what is
wrong without giving the answer. Configs are read as Triton's ModelConfig protobuf, so a rule that passes
means Triton would see that value.
"""

from __future__ import annotations

from dataclasses import dataclass

from servelab.model.contract import INPUT_NAME

ACCELERATOR = "tensorrt"
PROFILE_KEYS = ("trt_profile_min_shapes", "trt_profile_opt_shapes", "trt_profile_max_shapes")


@dataclass
class Rule:
    setting: str
    value: str
    ok: bool
    why: str
    hint: str = ""


def profile_batches(max_batch: int) -> tuple[int, int, int]:
    """(min, opt, max) batch of the profile: single images fit, the batcher's largest batch fits, and TensorRT
    tunes for a middle size (at most 32)."""
    return 1, max(1, min(32, max_batch // 2)), max_batch


def profile_shapes(input_name: str, dims, max_batch: int) -> dict[str, str]:
    """{"trt_profile_min_shapes": "pixel_values:1x3x224x224", …} for an input with per-item `dims`."""
    item = "x".join(str(d) for d in dims)
    return {key: f"{input_name}:{batch}x{item}" for key, batch in zip(PROFILE_KEYS, profile_batches(max_batch), strict=True)}


def accelerator_params(cfg) -> dict | None:
    accs = [a for a in cfg.optimization.execution_accelerators.gpu_execution_accelerator if a.name == ACCELERATOR]
    return dict(accs[0].parameters) if accs else None


def staged_profile(cfg, input_name: str = INPUT_NAME) -> tuple[int, int, int] | None:
    """(min, opt, max) batch of a config's trt_profile_* shapes for `input_name` (None: no complete profile)."""
    params = accelerator_params(cfg) or {}
    batches = tuple(_batch(params.get(k, ""), input_name) for k in PROFILE_KEYS)
    return batches if all(batches) else None


def _batch(value: str, input_name: str) -> int | None:
    """'pixel_values:64x3x224x224' -> 64 (None when the value names another input or has no batch)."""
    name, _, dims = value.partition(":")
    try:
        return int(dims.split("x", 1)[0]) if name == input_name and dims else None
    except ValueError:
        return None


def stanza_rules(cfg, *, max_batch: int, cache_path: str | None = None, input_name: str = INPUT_NAME) -> list[Rule]:
    """The accelerator stanza: TensorRT on, fp16, engine cache on and under `cache_path` (any absolute path
    when None), and a profile for `input_name` from batch 1 to `max_batch`."""
    p = accelerator_params(cfg)
    present = p is not None
    p = p or {}
    cache = p.get("trt_engine_cache_path", "")
    on_volume = (cache == cache_path or cache.startswith(cache_path.rstrip("/") + "/")) if cache_path else cache.startswith("/")
    missing = [k for k in PROFILE_KEYS if k not in p]
    lo, opt, hi = (_batch(p.get(k, ""), input_name) for k in PROFILE_KEYS)
    unreadable = [k for k, b in zip(PROFILE_KEYS, (lo, opt, hi), strict=True) if k in p and b is None]
    rules = [
        Rule("TensorRT accelerator configured", ACCELERATOR if present else "none", present,
             "without it ONNX Runtime runs the CUDA EP only",
             f'no gpu_execution_accelerator named "{ACCELERATOR}" under optimization {{ execution_accelerators }}'),
        Rule("fp16 precision", p.get("precision_mode", "-"), p.get("precision_mode") == "FP16",
             "fp16 tensor cores: the main TensorRT speed-up",
             "precision_mode should make TensorRT use the GPU's fp16 tensor cores"),
        Rule("engine cache enabled", p.get("trt_engine_cache_enable", "-"), p.get("trt_engine_cache_enable") == "1",
             "otherwise every start rebuilds the engine (minutes)",
             "the engine cache is off: every container start would rebuild the engine"),
        Rule("engine cache on the mounted volume", cache or "-", on_volume, "the cache must outlive the container",
             f"trt_engine_cache_path {cache!r} is not the mounted cache volume"),
        Rule("profile names the input", ", ".join(p.get(k, "-") for k in PROFILE_KEYS), not missing and not unreadable,
             "without a profile the engine fits one shape only",
             f"missing {', '.join(missing)}: without a profile the engine fits one shape only" if missing else
             f"{', '.join(unreadable)} should read '{input_name}:<batch>x3x224x224'"),
        Rule("profile min batch = 1", p.get(PROFILE_KEYS[0], "-"), lo == 1, "batch-1 requests must fit the profile",
             f"the profile's min batch is {lo}: single-image requests would not fit"),
        Rule("profile max batch = max_batch_size", p.get(PROFILE_KEYS[2], "-"), hi == max_batch,
             f"the dynamic batcher can form batches up to {max_batch}",
             f"the profile's max batch is {hi}, but the dynamic batcher can form batches up to max_batch_size ({max_batch})"),
        Rule("profile opt batch within [1, max]", p.get(PROFILE_KEYS[1], "-"),
             None not in (lo, opt, hi) and lo <= opt <= hi, "the shape TensorRT tunes for",
             f"the opt batch {opt} is outside the profile's [min, max]"),
    ]
    return rules


def deployment_rules(cfg) -> list[Rule]:
    """Around the stanza, in a whole model config: timing cache, dynamic batching, warm-up at the profile's
    ends, GPU instances, and no CUDA-graphs option (which onnxruntime ignores)."""
    from tritonclient.grpc import model_config_pb2 as mc

    p = accelerator_params(cfg) or {}
    mb = cfg.max_batch_size
    warm = sorted(w.batch_size for w in cfg.model_warmup)
    kinds = {g.kind for g in cfg.instance_group}
    return [
        Rule("timing cache enabled", p.get("trt_timing_cache_enable", "-"), p.get("trt_timing_cache_enable") == "1",
             "speeds up builds of new shapes/engines"),
        Rule("dynamic batching on", "yes" if cfg.HasField("dynamic_batching") else "no", cfg.HasField("dynamic_batching"),
             "batches concurrent requests"),
        Rule("warm-up covers 1 and max batch", ", ".join(map(str, warm)) or "-", bool(warm) and warm[0] == 1 and warm[-1] == mb,
             "the engine is built at load, not on the first request"),
        Rule("instances on GPU", ", ".join(mc.ModelInstanceGroup.Kind.Name(k) for k in kinds) or "-",
             kinds == {mc.ModelInstanceGroup.KIND_GPU}, "TensorRT runs only on a GPU instance"),
        Rule("no cuda graphs option (ignored by ORT)", "absent" if not cfg.optimization.HasField("cuda") else "present",
             not cfg.optimization.HasField("cuda"), "`optimization { cuda { graphs } }` does nothing for onnxruntime"),
    ]
