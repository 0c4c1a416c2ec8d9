"""Every committed and every staged config.pbtxt is a valid Triton ModelConfig, with the knobs where we put them."""

from __future__ import annotations

from pathlib import Path

import pytest
from tritonclient.grpc import model_config_pb2 as mc

from servelab.triton.repository import STAGING, parse_config, parse_config_text, stage

pytestmark = pytest.mark.triton

TEMPLATES = sorted(STAGING.glob("*/*/config.pbtxt"))


def test_templates_exist_for_both_flavours():
    names = {(p.parent.parent.name, p.parent.name) for p in TEMPLATES}
    assert {("cpu", "openclip_vit_b32_cpu"), ("cpu", "preprocess_jpeg"), ("cpu", "openclip_vit_b32_jpeg"),
            ("gpu", "openclip_vit_b32"), ("gpu", "openclip_vit_b32_trt"), ("gpu", "preprocess_jpeg"),
            ("gpu", "openclip_vit_b32_jpeg")} <= names


@pytest.mark.parametrize("path", TEMPLATES, ids=lambda p: f"{p.parent.parent.name}/{p.parent.name}")
def test_template_parses_into_model_config(path: Path):
    cfg = parse_config(path)
    assert isinstance(cfg, mc.ModelConfig)
    assert cfg.name == path.parent.name  # Triton refuses a config whose name differs from its folder
    assert cfg.max_batch_size > 0
    assert (path.parent / "1").is_dir()
    if cfg.platform == "ensemble":
        siblings = {p.name for p in path.parent.parent.iterdir()}
        for step in cfg.ensemble_scheduling.step:
            assert step.model_name in siblings, f"{cfg.name} chains to missing {step.model_name}"
    elif cfg.backend == "python":
        assert (path.parent / "1" / "model.py").is_file()


def test_invalid_config_is_a_clear_error():
    with pytest.raises(ValueError, match="not a valid Triton model config"):
        parse_config_text('name: "x"\nmax_batch_size: "many"')


def test_gpu_stage_sets_explicit_gpus_trt_profiles_and_warmup(onnx_meta, settings, tmp_path):
    out = tmp_path / "gpu_models"
    info = stage("gpu", out, instances=2, gpus=[0, 1], max_batch=16, max_delay_us=300, trt_cache="/cache/trt",
                 settings=settings)
    assert set(info["models"]) == {"openclip_vit_b32", "openclip_vit_b32_trt", "preprocess_jpeg", "openclip_vit_b32_jpeg"}
    for name in ("openclip_vit_b32", "openclip_vit_b32_trt"):
        cfg = parse_config(out / name / "config.pbtxt")
        assert cfg.platform == "onnxruntime_onnx"
        assert cfg.max_batch_size == 16
        assert cfg.dynamic_batching.max_queue_delay_microseconds == 300
        [group] = cfg.instance_group
        assert group.kind == mc.ModelInstanceGroup.KIND_GPU and group.count == 2 and list(group.gpus) == [0, 1]
        assert not cfg.optimization.cuda.graphs  # ignored by the ORT backend; never promise it
        assert (out / name / "1" / "model.onnx").stat().st_size == Path(onnx_meta["path"]).stat().st_size
        assert cfg.parameters["weights"].string_value == onnx_meta["weights"]
    trt = parse_config(out / "openclip_vit_b32_trt" / "config.pbtxt")
    [acc] = trt.optimization.execution_accelerators.gpu_execution_accelerator
    assert acc.name == "tensorrt" and acc.parameters["precision_mode"] == "FP16"
    assert acc.parameters["trt_engine_cache_path"] == "/cache/trt"  # exists: no instance creates a folder
    assert acc.parameters["trt_engine_cache_prefix"] == f"openclip_{onnx_meta['sha256'][:16]}"  # per export
    assert acc.parameters["trt_timing_cache_path"] == "/cache/trt"
    assert acc.parameters["trt_profile_min_shapes"] == "pixel_values:1x3x224x224"
    assert acc.parameters["trt_profile_max_shapes"] == "pixel_values:16x3x224x224"
    assert {w.batch_size for w in trt.model_warmup} == {1, 16}
    ens = parse_config(out / "openclip_vit_b32_jpeg" / "config.pbtxt")
    assert [s.model_name for s in ens.ensemble_scheduling.step] == ["preprocess_jpeg", "openclip_vit_b32"]


def test_cpu_stage_sets_instances_delay_threads(onnx_meta, settings, tmp_path):
    out = tmp_path / "cpu_models"
    stage("cpu", out, instances=3, max_delay_us=1234, threads=1, settings=settings)
    cfg = parse_config(out / "openclip_vit_b32_cpu" / "config.pbtxt")
    [group] = cfg.instance_group
    assert group.kind == mc.ModelInstanceGroup.KIND_CPU and group.count == 3
    assert cfg.dynamic_batching.max_queue_delay_microseconds == 1234
    assert cfg.parameters["intra_op_threads"].string_value == "1"
    assert cfg.parameters["intra_op_spinning"].string_value == "1"  # onnxruntime's default, as the other engines
    # unbounded queue: a bound turns off the batcher's prefetching, and with it come 500 ms idle-timer stalls
    assert not cfg.dynamic_batching.HasField("default_queue_policy")
    pre = parse_config(out / "preprocess_jpeg" / "config.pbtxt")
    assert Path(pre.parameters["servelab_path"].string_value, "servelab", "model", "preprocess.py").is_file()
    assert not list(out.parent.glob(".cpu_models.staging-*"))  # the temporary folder is gone


def test_stage_rejects_bad_arguments(settings, tmp_path):
    with pytest.raises(ValueError, match="flavour"):
        stage("tpu", tmp_path / "m", settings=settings)
    with pytest.raises(ValueError, match="instances"):
        stage("cpu", tmp_path / "m", instances=0, settings=settings)
    assert not (tmp_path / "m").exists()


def test_stage_refuses_to_replace_a_folder_that_is_not_a_repository(settings, tmp_path):
    out = tmp_path / "precious"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    with pytest.raises(FileExistsError, match="not a model repository"):
        stage("cpu", out, settings=settings)
    assert (out / "notes.txt").read_text() == "keep me"


def test_cpu_stage_writes_the_emulated_device_from_the_settings(onnx_meta, settings, tmp_path):
    ours = settings.with_(device_profile="flat", emulated_devices=2, device_dir=tmp_path / "devices")
    stage("cpu", tmp_path / "m", instances=4, max_delay_us=500, settings=ours)
    cfg = parse_config(tmp_path / "m" / "openclip_vit_b32_emulated" / "config.pbtxt")
    params = {k: v.string_value for k, v in cfg.parameters.items()}
    assert params["device_profile"] == "flat" and params["emulated_devices"] == "2"
    assert params["device_dir"] == str((tmp_path / "devices").resolve())
    assert params["weights"] == "emulated flat, 2 devices"  # never the ONNX export's weights
    assert cfg.instance_group[0].count == 4 and cfg.dynamic_batching.max_queue_delay_microseconds == 500
    assert not (tmp_path / "m" / "openclip_vit_b32_emulated" / "1" / "model.onnx").exists()  # it runs no model
    with pytest.raises(ValueError, match="unknown device profile"):
        stage("cpu", tmp_path / "m2", settings=settings.with_(device_profile="a100"))


def test_the_staged_trt_profile_reads_back_as_batches():
    """05b's emulated engine cache starts from the template's own profile: batch 1, 32, 64."""
    from servelab.triton.tensorrt import staged_profile

    template = Path(__file__).resolve().parents[2] / "servelab/triton/staging/gpu/openclip_vit_b32_trt/config.pbtxt"
    assert staged_profile(parse_config(template)) == (1, 32, 64)
    assert staged_profile(parse_config(template), input_name="other") is None
