"""Triton's management API through tritonclient's own HTTP client: model config, (re)load with a config
override, unload, the repository index, and live reconfiguration (no server restart).

    from servelab.triton.control import get_config, reconfigure, model_states
    from servelab.triton.models import CPU_ENCODER
    cfg = get_config(http_url, CPU_ENCODER)                       # dict, as Triton serves it
    cfg = reconfigure(http_url, CPU_ENCODER, max_queue_delay_us=500, instances=2, repository="models")

`reconfigure` takes the model's current config from the server, changes dynamic_batching
max_queue_delay_microseconds, the queue bound (max_queue_size) and/or the instance_group count, and loads the
model again with that config as an override. Triton swaps the model in place: requests keep being served by
the old instances until the new ones are ready. Given `repository`, the same change is written to
<repository>/<m>/config.pbtxt too, so a later restart keeps it. Every failure is a RuntimeError carrying
Triton's own reason (after a failed reload the previous version keeps serving). Every call sends the key
that Triton's restricted APIs ask for (servelab.triton.access finds it), so callers pass only the URL.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

from servelab.errors import CannotRun, InvalidValue
from servelab.triton import access


def address(url: str) -> str:
    """"http://127.0.0.1:8003/" or "grpc://…" -> "127.0.0.1:8003" (tritonclient takes host:port, no scheme)."""
    return url.strip().split("://", 1)[-1].rstrip("/")


@contextlib.contextmanager
def management_client(http_url: str, what: str, timeout: float = 10.0, key: str | None = None):
    """A tritonclient HTTP client for one management call; its errors become RuntimeError("Triton <what>: …").

    Every call it makes carries the server's key (servelab.triton.access): `key`, else the key file of a server
    this user started on that port, else SERVELAB_TRITON_KEY. Triton refuses its model-repository, shared-memory,
    logging and trace APIs without it."""
    import tritonclient.http as th
    from tritonclient.utils import InferenceServerException

    client = th.InferenceServerClient(address(http_url), connection_timeout=timeout, network_timeout=timeout)
    access.send_key(client, http_url, key)
    try:
        yield client
    except InferenceServerException as exc:
        status = f"HTTP {exc.status()}: " if exc.status() else ""
        message = exc.message() or ""
        raise CannotRun(f"Triton {what} at {address(http_url)}: {status}{message}{access.refusal_hint(message)}") from None
    except OSError as exc:  # refused, reset, timed out
        raise CannotRun(f"Triton {what}: no answer from {address(http_url)} ({exc}); is the server running?") from None
    finally:
        client.close()


def get_config(http_url: str, model: str, timeout: float = 10.0) -> dict:
    with management_client(http_url, f"config of {model!r}", timeout) as c:
        return c.get_model_config(model)


def load_model(http_url: str, model: str, config: dict | None = None, timeout: float = 180.0) -> None:
    """Load (or reload) a model; `config` (a ModelConfig as dict) overrides config.pbtxt for this load."""
    with management_client(http_url, f"load {model!r}", timeout) as c:
        c.load_model(model, config=json.dumps(config) if config is not None else None)


def unload_model(http_url: str, model: str, timeout: float = 60.0) -> None:
    with management_client(http_url, f"unload {model!r}", timeout) as c:
        c.unload_model(model)


def model_states(http_url: str, timeout: float = 5.0) -> dict[str, str]:
    """{model name: state} from the repository index (READY, UNAVAILABLE, …; Triton's reason appended)."""
    with management_client(http_url, "repository index", timeout) as c:
        index = c.get_model_repository_index()
    out = {}
    for m in index:
        state = m.get("state", "") or "UNKNOWN"
        if m.get("reason"):
            state = f"{state}: {m['reason']}"
        out[m["name"]] = state
    return out


def _normalise(config: dict):
    """Server JSON -> ModelConfig protobuf (drops fields the server adds that the parser would reject)."""
    from google.protobuf import json_format
    from tritonclient.grpc import model_config_pb2

    return json_format.ParseDict(config, model_config_pb2.ModelConfig(), ignore_unknown_fields=True)


def config_dict(config: dict) -> dict:
    """A config as Triton reports it -> a dict Triton accepts back as a load's config override."""
    from google.protobuf import json_format

    return json_format.MessageToDict(_normalise(config), preserving_proto_field_name=True)


@contextlib.contextmanager
def loaded_with(http_url: str, model: str, config: dict, timeout: float = 180.0):
    """`model` reloaded with `config` (a ModelConfig as dict) inside the block, and with the config it had
    before on exit. Triton keeps a load's config override until a load with another one, so a plain reload
    without a config would not undo it."""
    with config_switch(http_url, model, [config], timeout=timeout) as use:
        use(0)
        yield get_config(http_url, model)


@contextlib.contextmanager
def config_switch(http_url: str, model: str, configs: list[dict], timeout: float = 180.0):
    """Yields `use(i)`, which loads `model` with `configs[i]` unless that one is already loaded (and returns
    whether it loaded): two configurations of one model measured in alternating windows
    (servelab.bench.experiments.ab's `prepare`). The config the model had before is loaded again on exit."""
    original = config_dict(get_config(http_url, model))
    # a reload costs seconds on a CPU (a new ONNX Runtime session): the model's own config, when it is one of
    # `configs`, counts as loaded, and is loaded again on exit only if another one is loaded then
    current: list[int | None] = [next((i for i, c in enumerate(configs) if c == original), None)]
    start = current[0]

    def use(i: int) -> bool:
        if current[0] == i:
            return False
        load_model(http_url, model, configs[i], timeout=timeout)
        current[0] = i
        return True

    try:
        yield use
    finally:
        if start is None or current[0] != start:
            load_model(http_url, model, original, timeout=timeout)


def config_with(http_url: str, model: str, *, max_queue_delay_us: int | None = None, instances: int | None = None,
                max_queue: int | None = None) -> dict:
    """The model's loaded config with the given changes, as a dict Triton accepts as a load's config override;
    nothing is loaded (`reconfigure` loads it; `config_switch` alternates between such configs).

    max_queue: at most this many requests wait in the dynamic batcher, the next is refused at once (HTTP 503 /
    gRPC UNAVAILABLE); 0 = unbounded, Triton's default, under which the batcher can prepare the next batch
    while the instance is busy (a bound turns that off).
    """
    from google.protobuf import json_format

    from servelab.triton.repository import set_instances

    if max_queue_delay_us is None and instances is None and max_queue is None:
        raise InvalidValue("nothing to change: give max_queue_delay_us, instances and/or max_queue")
    for name, value in (("max_queue_delay_us", max_queue_delay_us), ("max_queue", max_queue)):
        if value is not None and value < 0:
            raise InvalidValue(f"{name} must be >= 0, got {value}")
    cfg = _normalise(get_config(http_url, model))
    if (max_queue_delay_us is not None or max_queue is not None) and not cfg.HasField("dynamic_batching"):
        raise InvalidValue(f"model {model!r} has no dynamic_batching to reconfigure")
    if max_queue_delay_us is not None:
        cfg.dynamic_batching.max_queue_delay_microseconds = int(max_queue_delay_us)
    if max_queue is not None:
        cfg.dynamic_batching.default_queue_policy.max_queue_size = int(max_queue)
    if instances is not None:
        gpus = list(cfg.instance_group[0].gpus) if len(cfg.instance_group) else None
        set_instances(cfg, int(instances), gpus)
    return json_format.MessageToDict(cfg, preserving_proto_field_name=True)


def reconfigure(http_url: str, model: str, *, max_queue_delay_us: int | None = None, instances: int | None = None,
                max_queue: int | None = None, repository: Path | str | None = None, timeout: float = 180.0) -> dict:
    """Reload `model` with the changes (see `config_with`), also written to the repository's config.pbtxt when
    a repository is given; returns the config Triton reports after the reload."""
    from servelab.triton.repository import write_config

    override = config_with(http_url, model, max_queue_delay_us=max_queue_delay_us, instances=instances,
                           max_queue=max_queue)
    load_model(http_url, model, override, timeout=timeout)
    if repository is not None:
        path = Path(repository) / model / "config.pbtxt"
        if path.is_file():
            write_config(path, _normalise(override))
    return get_config(http_url, model)
