"""The closed word sets of the course, each defined once as a type: engines, providers, precisions, servers,
payloads, client modes, places and lab profiles.

    from servelab.vocabulary import Engine, Server
    Settings(engine=Engine.ONNX)            # a StrEnum member equals its string: Engine.ONNX == "onnx"
    Server("triton-grpc").protocol          # "grpc"
    ", ".join(Engine)                       # "torch, onnx, onnx-int8, emulated" for an error message

Every layer imports it (it imports only servelab.errors), so records, settings and command lines keep their
plain strings while the code names each word once.
"""

from __future__ import annotations

from enum import StrEnum
from typing import TypeVar

from servelab.errors import UnknownWord


class Word(StrEnum):
    """A closed set of words: members are their strings, and print as them in a dict or a log line too."""

    def __repr__(self) -> str:
        return repr(self.value)


W = TypeVar("W", bound=Word)


def choices(words: type[Word]) -> str:
    """The members of a word set as one `a | b | c` string, for help texts."""
    return " | ".join(words)


def word(words: type[W], value: str, what: str) -> W:
    """`value` as a member of `words`; UnknownWord (a ValueError) naming `what` and the allowed words when it is none of them."""
    try:
        return words(value)
    except ValueError:
        raise UnknownWord(f"{what} must be one of {', '.join(words)}, got {value!r}") from None


class Engine(Word):
    """What runs the model: PyTorch, the fp32 or int8 ONNX graph in ONNX Runtime, or an emulated accelerator
    (no model: a device profile's time per batch, servelab.model.emulated_engine)."""

    TORCH = "torch"
    ONNX = "onnx"
    ONNX_INT8 = "onnx-int8"
    EMULATED = "emulated"


# the engines that run the real model (every one but the emulated accelerator)
MODEL_ENGINES = (Engine.TORCH, Engine.ONNX, Engine.ONNX_INT8)
ONNX_ENGINES = (Engine.ONNX, Engine.ONNX_INT8)


class Provider(Word):
    """Where an engine runs: ONNX Runtime's execution provider, or the torch device kind."""

    CPU = "cpu"
    CUDA = "cuda"
    TENSORRT = "tensorrt"


class Precision(Word):
    """The torch engine's weights and activations; the ONNX engines run the fp32 export."""

    FP32 = "fp32"
    FP16 = "fp16"
    BF16 = "bf16"


class Server(Word):
    """A server kind, as records and handles name it. `fastapi-no-admission` is the service with its admission
    control off (the overload lesson); `in-process` is the engine called directly, without a server."""

    FASTAPI = "fastapi"
    FASTAPI_NO_ADMISSION = "fastapi-no-admission"
    LITSERVE = "litserve"
    TRITON_HTTP = "triton-http"
    TRITON_GRPC = "triton-grpc"
    IN_PROCESS = "in-process"

    @property
    def protocol(self) -> str | None:
        """Triton's protocol (`http` | `grpc`), None for the other servers."""
        return self.value.split("-")[1] if self.value.startswith("triton-") else None


# the servers InferenceClient talks to remotely
REMOTE_SERVERS = (Server.FASTAPI, Server.TRITON_HTTP, Server.TRITON_GRPC)
TRITON_SERVERS = (Server.TRITON_HTTP, Server.TRITON_GRPC)


class Payload(Word):
    """What a client sends: encoded image files (the far side decodes), or preprocessed float32 tensors."""

    JPEG = "jpeg"
    TENSOR = "tensor"


class ClientMode(Word):
    """Where InferenceClient runs the model: in this process, on a server, or a server when one answers."""

    LOCAL = "local"
    REMOTE = "remote"
    AUTO = "auto"


class Place(Word):
    """Where the lab runs: this machine, or a GPU node whose compose stacks serve the notebooks."""

    LOCAL = "local"
    NODE = "node"


class LabProfile(Word):
    """A lab run's size (servelab.lab.params.LAB_PROFILES): seconds per notebook, the default lab, longer sweeps,
    or one GPU machine."""

    SMOKE = "smoke"
    DEFAULT = "default"
    FULL = "full"
    GPU = "gpu"
