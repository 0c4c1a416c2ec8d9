"""Checks of settings a student writes as text: Triton config.pbtxt stanzas (parsed as Triton's ModelConfig),
Kubernetes probes and compose healthchecks (parsed as YAML), and ONNX Runtime's providers list. Nothing is
started: the text is read and held to the rules the server would apply, and a hint names the rule broken.

    batching_stanza(text, max_batch=32, count=2, exercise="…")
    compose_healthcheck(yaml_text, cold_start_s=8.0, exercise="02.1")

A stanza that should also be loaded into the running Triton is checked live (servelab.assignments.checks.live_configs).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from servelab.assignments.result import CheckResult, reject, run_check
from servelab.errors import InvalidValue
from servelab.model.contract import INPUT_NAME


def parse_config(text, what: str = "your stanza"):
    """A config.pbtxt fragment -> Triton's ModelConfig protobuf, or a hint naming the parse error."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    if not isinstance(text, str) or not text.strip():
        reject(f"{what} is empty: write it as config.pbtxt text (a string)")
    try:
        return text_format.Parse(text, model_config_pb2.ModelConfig())
    except text_format.ParseError as exc:
        reject(f"Triton would not load {what}: {exc} (field and enum names are in Triton's model_config.proto)")


def _kind_name(kind: int) -> str:
    from tritonclient.grpc import model_config_pb2

    return model_config_pb2.ModelInstanceGroup.Kind.Name(kind)


def batching_stanza(answer, *, max_batch: int, kind: str = "KIND_CPU", count: int | None = None,
                    max_delay_us: int | None = None, exercise: str, step=None,
                    strict: bool | None = None) -> CheckResult:
    """answer: config.pbtxt text with `dynamic_batching { … }` and `instance_group [ … ]`, or fn(max_batch) -> text.

    Correct: parses as Triton's ModelConfig; dynamic batching with preferred sizes in 1..max_batch and a
    positive max_queue_delay_microseconds (equal to `max_delay_us` when given); every instance group of
    `kind`, with `count` instances in total when given; a max_batch_size, if written, equal to max_batch."""

    def judge(text):
        return "valid ModelConfig: " + batching_rules(parse_config(text), max_batch, kind, count, max_delay_us)

    return run_check("batching_stanza", exercise, answer, (max_batch,), judge, step, strict)


def batching_rules(cfg, max_batch: int, kind: str, count: int | None, max_delay_us: int | None) -> str:
    """The rules of a dynamic_batching + instance_group stanza (rejects with a hint); returns a summary."""
    if cfg.max_batch_size and cfg.max_batch_size != max_batch:
        reject(f"max_batch_size {cfg.max_batch_size} differs from this model's {max_batch}; leave it out or match it")
    if not cfg.HasField("dynamic_batching"):
        reject("there is no dynamic_batching stanza: without it Triton runs each request on its own")
    db = cfg.dynamic_batching
    bad = [s for s in db.preferred_batch_size if not 1 <= s <= max_batch]
    if bad:
        reject(f"preferred_batch_size {bad} outside 1..max_batch_size ({max_batch}): Triton refuses the config")
    if db.max_queue_delay_microseconds <= 0:
        reject("max_queue_delay_microseconds is 0 or missing: requests would not wait for each other")
    if max_delay_us is not None and db.max_queue_delay_microseconds != max_delay_us:
        reject(f"max_queue_delay_microseconds is {db.max_queue_delay_microseconds}; use the delay the exercise asks for")
    if not cfg.instance_group:
        reject("there is no instance_group: say where the model runs and how many copies")
    kinds = {_kind_name(g.kind) for g in cfg.instance_group}
    if kinds != {kind}:
        reject(f"instance_group kind {', '.join(sorted(kinds))}: this deployment needs {kind}")
    total = sum(max(g.count, 1) * (len(g.gpus) if g.gpus else 1) for g in cfg.instance_group)
    if count is not None and total != count:
        reject(f"your instance_group gives {total} instance(s); the exercise asks for {count}")
    pref = ", ".join(map(str, db.preferred_batch_size)) or "none"
    return f"dynamic batching (preferred {pref}, delay {db.max_queue_delay_microseconds} µs), {total} × {kind}"


def gpu_instance_group(answer, *, gpus: Iterable[int], per_gpu: int, exercise: str, step=None,
                       strict: bool | None = None) -> CheckResult:
    """answer: config.pbtxt text with `instance_group [ … ]`, or fn(gpus, per_gpu) -> text.

    Correct: KIND_GPU groups whose explicit `gpus` lists cover exactly `gpus`, giving `per_gpu` instances on
    each (note `count: N` without `gpus` means N on *every* visible GPU)."""
    gpus = list(gpus)

    def judge(text):
        cfg = parse_config(text)
        if not cfg.instance_group:
            reject("there is no instance_group stanza")
        on: dict[int, int] = {}
        for g in cfg.instance_group:
            if _kind_name(g.kind) != "KIND_GPU":
                reject(f"a group has kind {_kind_name(g.kind)}: these instances must run on GPUs (KIND_GPU)")
            if not g.gpus:
                reject("a group has no `gpus` list: `count` then applies to every visible GPU; list the GPUs explicitly")
            for gpu in g.gpus:
                on[gpu] = on.get(gpu, 0) + max(g.count, 1)
        extra = sorted(set(on) - set(gpus))
        if extra:
            reject(f"instances on GPU(s) {extra}, which this exercise does not use")
        wrong = {k: v for k, v in on.items() if v != per_gpu}
        missing = sorted(set(gpus) - set(on))
        if missing:
            reject(f"GPU(s) {missing} get no instance")
        if wrong:
            reject(f"GPU(s) {sorted(wrong)} get {sorted(set(wrong.values()))} instance(s); the exercise asks for {per_gpu} each")
        return f"{per_gpu} instance(s) on each of GPUs {gpus}: {per_gpu * len(gpus)} in total"

    return run_check("gpu_instance_group", exercise, answer, (gpus, per_gpu), judge, step, strict)


def trt_accelerator_stanza(answer, *, max_batch: int, cache_path: str, input_name: str = INPUT_NAME,
                           exercise: str, step=None, strict: bool | None = None) -> CheckResult:
    """answer: config.pbtxt text with `optimization { execution_accelerators { … } }`, or fn(max_batch, cache_path).

    Correct: a `tensorrt` GPU accelerator with FP16, engine cache enabled at `cache_path`, and a profile whose
    min batch is 1 and max batch is max_batch (opt in between), all for input `input_name`."""

    def judge(text):
        from servelab.triton.tensorrt import accelerator_params, stanza_rules

        cfg = parse_config(text)
        for rule in stanza_rules(cfg, max_batch=max_batch, cache_path=cache_path, input_name=input_name):
            if not rule.ok:
                reject(rule.hint)
        opt = accelerator_params(cfg)["trt_profile_opt_shapes"].partition(":")[2].split("x", 1)[0]
        return f"TensorRT fp16 with engine cache at {cache_path}, profile batch 1…{max_batch} (opt {opt})"

    return run_check("trt_accelerator_stanza", exercise, answer, (max_batch, cache_path), judge, step, strict)


def _yaml(text, what: str) -> dict:
    import yaml

    if isinstance(text, Mapping):
        return dict(text)
    if not isinstance(text, str) or not text.strip():
        reject(f"{what} is empty: write it as YAML text")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        reject(f"{what} is not valid YAML: {str(exc).splitlines()[0]}")
    if not isinstance(data, dict):
        reject(f"{what} should be a YAML mapping (key: value lines)")
    return data


def k8s_probes(answer, *, cold_start_s: float, margin: float = 2.0, exercise: str, step=None,
               strict: bool | None = None) -> CheckResult:
    """answer: YAML for the container's `startupProbe`, `readinessProbe` and `livenessProbe`, or fn(cold_start_s).

    Correct: startup asks /readyz (the model loaded within the allowance; the other probes wait for it),
    readiness asks /readyz (take the pod out of the Service while it cannot serve), liveness asks
    /healthz (restart only a dead process — never one that is merely busy or still loading), and the startup
    probe allows at least `margin` × this run's measured cold start (periodSeconds × failureThreshold)."""

    def judge(text):
        spec = _yaml(text, "your probes")
        for name in ("startupProbe", "readinessProbe", "livenessProbe"):
            if not isinstance(spec.get(name), Mapping):
                reject(f"no {name}: write all three under the container")
            if not isinstance(spec[name].get("httpGet"), Mapping) or not spec[name]["httpGet"].get("path"):
                reject(f"{name} needs an httpGet with a path")
        path = {n: spec[n]["httpGet"]["path"] for n in ("startupProbe", "readinessProbe", "livenessProbe")}
        if path["startupProbe"] != "/readyz":
            reject(f"the startup probe asks {path['startupProbe']}, which answers as soon as the process listens: it "
                   "passes while the model is still loading, so its allowance times nothing and a load that hangs is "
                   "never restarted. Ask the endpoint that answers once the model can serve")
        if path["readinessProbe"] != "/readyz":
            reject("the readiness probe should ask the endpoint that says whether the model can serve now")
        if path["livenessProbe"] == "/readyz":
            reject("a liveness probe on readiness restarts pods that are only busy or loading: ask the process-alive endpoint")
        if path["livenessProbe"] != "/healthz":
            reject(f"the liveness probe asks {path['livenessProbe']}, which the service does not serve as a liveness check")
        sp = spec["startupProbe"]
        allowed = float(sp.get("periodSeconds", 10)) * float(sp.get("failureThreshold", 3))
        if allowed < cold_start_s * margin:
            reject(f"the startup probe gives up after {allowed:g} s; this run measured a cold start of "
                   f"{cold_start_s:.1f} s and the probe should allow {margin:g}× that")
        return f"startup and readiness /readyz, liveness /healthz, startup allows {allowed:g} s (cold start here {cold_start_s:.1f} s)"

    return run_check("k8s_probes", exercise, answer, (cold_start_s,), judge, step, strict)


def _seconds(value, what: str) -> float:
    """Compose durations: '30s', '1m30s', '500ms', or a number of seconds."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    text = str(value).strip()
    parts = re.findall(r"(\d+(?:\.\d+)?)(h|ms|m|s|us)", text)
    if not parts or "".join(a + b for a, b in parts) != text:
        reject(f"{what} {value!r} is not a duration like '30s' or '1m30s'")
    scale = {"h": 3600, "m": 60, "s": 1, "ms": 1e-3, "us": 1e-6}
    return sum(float(a) * scale[b] for a, b in parts)


def compose_healthcheck(answer, *, cold_start_s: float, port: int = 8002, margin: float = 1.5,
                        path: str = "/readyz", liveness_path: str = "/healthz", script: str = "healthcheck.py",
                        missing_tools: tuple = ("curl", "wget"), exercise: str, step=None,
                        strict: bool | None = None) -> CheckResult:
    """answer: YAML of a compose service's `healthcheck:` mapping (with or without the `healthcheck:` key), or
    fn(cold_start_s). Correct: a CMD/CMD-SHELL test that asks the service on `port` whether it is ready (`path`;
    or runs the image's own `script`, which does), using no tool the slim image lacks (`missing_tools`), and a
    start_period that covers `margin` × this run's measured cold start (failures during it do not count).
    `liveness_path` is refused with the reason: it answers while the model loads, so `healthy` would come
    before the service can serve and `depends_on: service_healthy` would send it traffic it cannot answer."""

    def judge(text):
        hc = _yaml(text, "your healthcheck")
        hc = hc.get("healthcheck", hc)
        if not isinstance(hc, Mapping) or "test" not in hc:
            reject("a compose healthcheck needs a `test` (e.g. [\"CMD\", …])")
        test = hc["test"]
        cmd = " ".join(map(str, test)) if isinstance(test, list) else str(test)
        if isinstance(test, list) and (not test or test[0] not in ("CMD", "CMD-SHELL")):
            reject("a list `test` starts with \"CMD\" (run a program) or \"CMD-SHELL\" (run a shell line)")
        tools = [t for t in missing_tools if re.search(rf"\b{t}\b", cmd)]
        if tools:
            reject(f"the slim service image has no {tools[0]}: use its Python (the image ships a {script})")
        if script not in cmd:
            if path not in cmd and liveness_path in cmd:
                reject(f"{liveness_path} answers as soon as the process listens, while the model is still loading: "
                       f"Docker would call the container healthy before it can serve. Ask {path} (ready to serve)")
            if path not in cmd:
                reject(f"the test should ask the service whether it is ready to serve ({path})")
            if str(port) not in cmd:
                reject(f"the test runs inside the container: ask the service's own port ({port})")
        if "start_period" not in hc:
            reject("no start_period: failures while the model loads would count against the container")
        sp = _seconds(hc["start_period"], "start_period")
        if sp < cold_start_s * margin:
            reject(f"start_period {sp:g} s is shorter than {margin:g}× the cold start this run measured ({cold_start_s:.1f} s)")
        return f"healthcheck `{cmd}`, start_period {sp:g} s (cold start here {cold_start_s:.1f} s)"

    return run_check("compose_healthcheck", exercise, answer, (cold_start_s,), judge, step, strict)



_ORT_NAMES = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider", "tensorrt": "TensorrtExecutionProvider"}


def execution_providers(answer, *, want: str, exercise: str, step=None, strict: bool | None = None) -> CheckResult:
    """answer: the ONNX Runtime providers list for a session that should run on `want` (cpu | cuda | tensorrt),
    or fn(want). Correct: real provider names, `want` first, CUDA behind TensorRT (for the ops TensorRT
    rejects), CPU last."""
    if want not in _ORT_NAMES:
        raise InvalidValue(f"want must be one of {', '.join(_ORT_NAMES)}")

    def judge(value):
        if isinstance(value, str) or not isinstance(value, (list, tuple)):
            reject("answer with a list of provider names, e.g. the value you would pass as providers=[…]")
        names = [v[0] if isinstance(v, tuple) else v for v in value]
        try:
            import onnxruntime

            known = set(onnxruntime.get_all_providers())
        except ImportError:
            known = set(_ORT_NAMES.values())
        unknown = [n for n in names if n not in known]
        if unknown:
            reject(f"{unknown} not ONNX Runtime provider names (see onnxruntime.get_all_providers())")
        if not names or names[0] != _ORT_NAMES[want]:
            reject(f"ONNX Runtime tries providers in order: the first one should be the {want} provider")
        if names[-1] != _ORT_NAMES["cpu"]:
            reject("end with the CPU provider, so operators the GPU providers cannot take still run")
        if want == "tensorrt" and _ORT_NAMES["cuda"] not in names:
            reject("put CUDA between TensorRT and CPU: sub-graphs TensorRT rejects should still run on the GPU")
        return f"{' → '.join(names)}"

    return run_check("execution_providers", exercise, answer, (want,), judge, step, strict)



PERF_LINES = ("http", "grpc", "grpc shared")


def perf_command(lines, key: str, keys, binary, wanted: dict[str, str]) -> tuple[dict, list[str]]:
    """The command line `lines[key]` (one of `keys`) as (environment, argv), held to what every perf_analyzer line of an exercise
    needs (rejects with a hint): it runs `binary`, each option of `wanted` has its value (a single concurrency
    `8` also matches `8:8`; a range `1:8:7` must be written as such), and its requests are of batch 1."""
    from pathlib import Path

    from servelab.triton.perf_analyzer import option, parse_line

    text = lines.get(key)
    if not isinstance(text, str) or not text.strip():
        reject(f'"{key}" is missing: return a dict with the keys {", ".join(keys)}, each a command line')
    try:
        env, argv = parse_line(text)
    except ValueError as exc:
        reject(f'"{key}": {exc}')
    if Path(argv[0]).name != Path(str(binary)).name:
        reject(f'"{key}" runs {argv[0]!r}: start the command with the perf_analyzer binary ({binary})')
    for flag, value in wanted.items():
        got = option(argv, flag)
        single = ":" not in value
        if (got is None or (single and (got.split(":")[0] != value or got.count(":") and got.split(":")[1] not in ("", value)))
                or (not single and got != value)):
            reject(f'"{key}": {flag} {got or "(missing)"}; this measurement needs {flag} {value}')
    if option(argv, "-b", "--batch-size", default="1") != "1":
        reject(f'"{key}": batch {option(argv, "-b", "--batch-size")}: the comparison is of batch-1 requests')
    return env, argv


def perf_analyzer_lines(answer, *, binary, model: str, http_address: str, grpc_address: str, clients: int,
                        requests: int, exercise: str, step=None, strict: bool | None = None) -> CheckResult:
    """answer: {"http": line, "grpc": line, "grpc shared": line} of shell command lines, or fn(binary, model,
    http_address, grpc_address, clients, requests) returning it.

    Correct: each line runs `binary` against `model` with `clients` concurrent clients (`--concurrency-range`) of
    batch-1 requests, in three windows of `requests` requests taken as they come (`--measurement-mode
    count_windows --measurement-request-count`, a stability percentage of at least 100; not `--request-count`,
    whose figure perf_analyzer divides by whole seconds); "http" over `-i http` at http_address, the two
    others over `-i grpc` at grpc_address, "grpc" with every client on its own channel (TRITON_CLIENT_GRPC_CHANNEL_
    MAX_SHARE_COUNT=1 before the command) and "grpc shared" with all of them on one (a share count of at least
    `clients`); apart from those, the three lines ask for the same measurement, so a ratio of two compares only
    the protocol or the channel."""
    from servelab.triton.perf_analyzer import SHARE_ENV, option

    def words(lines, key):
        env, argv = perf_command(lines, key, PERF_LINES, binary, {"-m": model, "--concurrency-range": str(clients),
                                                                  "--measurement-mode": "count_windows",
                                                                  "--measurement-request-count": str(requests)})
        if option(argv, "--request-count"):
            reject(f'"{key}": --request-count: perf_analyzer divides that count by the elapsed time rounded up to '
                   "whole seconds; measure windows of requests instead")
        stability = option(argv, "-s", "--stability-percentage", default="10")
        if not stability.isdigit() or int(stability) < 100:
            reject(f'"{key}": -s {stability}: on a shared machine the windows may never agree; a stability percentage '
                   "of 999 takes three windows as they come, the same count on every line")
        protocol = "http" if key == "http" else "grpc"
        if option(argv, "-i", "--protocol", default="http") != protocol:
            reject(f'"{key}" speaks -i {option(argv, "-i", "--protocol", default="http")}; it should speak -i {protocol}')
        address = http_address if protocol == "http" else grpc_address
        if option(argv, "-u", "--url") != address:
            reject(f'"{key}" sends to -u {option(argv, "-u", "--url")}; {protocol.upper()} listens at {address}')
        share = env.get(SHARE_ENV)
        if key == "grpc" and share != "1":
            reject(f'"grpc": each client should have its own channel; set {SHARE_ENV}=1 before the command')
        if key == "grpc shared" and not (share or "").isdigit() or key == "grpc shared" and int(share) < clients:
            reject(f'"grpc shared": {SHARE_ENV}={share}; all {clients} clients share one channel only when it is at '
                   f'least {clients}')
        rest, skip = [], {"-i", "--protocol", "-u", "--url"}
        it = iter(argv[1:])
        for w in it:
            if w in skip:
                next(it, None)
            elif not w.startswith(("--protocol=", "--url=")):
                rest.append(w)
        return sorted(rest)

    def judge(lines):
        if not isinstance(lines, dict):
            reject(f"return a dict of command lines with the keys {', '.join(PERF_LINES)}")
        measured = {key: words(lines, key) for key in PERF_LINES}
        if not measured["http"] == measured["grpc"] == measured["grpc shared"]:
            reject("the three lines ask for different measurements beyond protocol, address and channel: keep every "
                   "other option the same, or the ratio compares those too")
        return (f"three lines for one point: {clients} clients, three windows of {requests} batch-1 requests, HTTP "
                "against gRPC with a channel per client and with one shared channel")

    return run_check("perf_analyzer_lines", exercise, answer, (binary, model, http_address, grpc_address, clients,
                                                              requests), judge, step, strict)
