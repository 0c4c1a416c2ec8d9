"""Live reconfiguration through Triton's model-repository API (no server restart).

    from servelab.triton.control import get_config, reconfigure, load_model, unload_model
    cfg = get_config(http_url, "openclip_vit_b32_cpu")            # dict, as Triton serves it
    cfg = reconfigure(http_url, "openclip_vit_b32_cpu", max_queue_delay_us=500, instances=2,
                      repository="models", timeout=120)           # -> the config Triton reports after reload

`reconfigure` takes the model's current config from the server, changes dynamic_batching
max_queue_delay_microseconds and/or the instance_group count, and loads the model again with that config as
an override (POST /v2/repository/models/<m>/load {"parameters": {"config": ...}}). Triton swaps the model in
place: requests keep being served by the old instances until the new ones are ready. Given `repository`, the
same change is written to <repository>/<m>/config.pbtxt too, so a later restart keeps it. Raises RuntimeError
with Triton's reason when the reload fails (the previous version keeps serving).
"""

from __future__ import annotations

import json
from pathlib import Path


def _base(url: str) -> str:
    url = url.rstrip("/")
    return url if "://" in url else f"http://{url}"


def _raise(r, what: str) -> None:
    if r.status_code != 200:
        try:
            msg = r.json().get("error", r.text)
        except Exception:
            msg = r.text
        raise RuntimeError(f"Triton {what}: HTTP {r.status_code}: {msg}")


def get_config(http_url: str, model: str, timeout: float = 10.0) -> dict:
    import httpx

    r = httpx.get(f"{_base(http_url)}/v2/models/{model}/config", timeout=timeout)
    _raise(r, f"config of {model!r}")
    return r.json()


def load_model(http_url: str, model: str, config: dict | None = None, timeout: float = 180.0) -> None:
    """Load (or reload) a model; `config` (a ModelConfig as dict/JSON) overrides config.pbtxt for this load."""
    import httpx

    body = {"parameters": {"config": json.dumps(config)}} if config is not None else {}
    r = httpx.post(f"{_base(http_url)}/v2/repository/models/{model}/load", json=body, timeout=timeout)
    _raise(r, f"load {model!r}")


def unload_model(http_url: str, model: str, timeout: float = 60.0) -> None:
    import httpx

    r = httpx.post(f"{_base(http_url)}/v2/repository/models/{model}/unload", json={}, timeout=timeout)
    _raise(r, f"unload {model!r}")


def _normalise(config: dict):
    """Server JSON -> ModelConfig protobuf (drops fields the server adds that the parser would reject)."""
    from google.protobuf import json_format
    from tritonclient.grpc import model_config_pb2

    return json_format.ParseDict(config, model_config_pb2.ModelConfig(), ignore_unknown_fields=True)


def reconfigure(http_url: str, model: str, *, max_queue_delay_us: int | None = None, instances: int | None = None,
                repository: Path | str | None = None, timeout: float = 180.0) -> dict:
    from google.protobuf import json_format

    from servelab.triton.repository import set_instances, write_config

    if max_queue_delay_us is None and instances is None:
        raise ValueError("nothing to change: give max_queue_delay_us and/or instances")
    if max_queue_delay_us is not None and max_queue_delay_us < 0:
        raise ValueError(f"max_queue_delay_us must be >= 0, got {max_queue_delay_us}")
    cfg = _normalise(get_config(http_url, model))
    if max_queue_delay_us is not None:
        if not cfg.HasField("dynamic_batching"):
            raise ValueError(f"model {model!r} has no dynamic_batching to reconfigure")
        cfg.dynamic_batching.max_queue_delay_microseconds = int(max_queue_delay_us)
    if instances is not None:
        gpus = list(cfg.instance_group[0].gpus) if len(cfg.instance_group) else None
        set_instances(cfg, int(instances), gpus)
    override = json_format.MessageToDict(cfg, preserving_proto_field_name=True)
    load_model(http_url, model, override, timeout=timeout)
    if repository is not None:
        path = Path(repository) / model / "config.pbtxt"
        if path.is_file():
            write_config(path, cfg)
    return get_config(http_url, model)
