"""Result records (one JSON line per measurement), their JSON schema, and runs.

A *run* is a folder `results/<run-id>/` holding `records.jsonl`, `environment.json` (the fingerprint: CPU,
cores, GPU via NVML when importable, library versions, git sha, weights label) and the tables and plots
made from the records. Files are written to a temporary name and renamed, so a crash never leaves half a
file. Every field that a measurement could not fill is null — never a made-up number.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
from pathlib import Path

from servelab.config import results_dir
from servelab.errors import InvalidValue
from servelab.fileio import atomic_write
from servelab.fingerprint import environment_fingerprint, nvml

SCHEMA_VERSION = 2  # 2: the server kind is `server` (was `target`), its counters `server_stats` (were `server`)
KINDS = ("load", "raw", "ab", "serialisation", "cold-start", "profile", "unavailable", "derived", "probe")

_num = {"type": ["number", "null"]}
_int = {"type": ["integer", "null"], "minimum": 0}
_str = {"type": ["string", "null"]}

RECORD_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "servelab benchmark record",
    "type": "object",
    "required": [
        "schema_version", "run_id", "experiment", "kind", "timestamp", "server", "backend", "engine", "protocol",
        "payload", "batch", "concurrency", "rate_rps", "latency_p50_ms", "latency_p95_ms", "latency_p99_ms",
        "throughput_img_s", "requests", "errors", "repeats", "stable", "spread", "server_stats", "memory", "weights",
        "available", "params",
    ],
    "properties": {
        "schema_version": {"const": SCHEMA_VERSION},
        "run_id": {"type": "string", "minLength": 1},
        "experiment": {"type": "string", "minLength": 1},
        "kind": {"enum": list(KINDS)},
        "timestamp": {"type": "string"},
        "server": {"type": "string"},
        "backend": _str, "engine": _str, "provider": _str, "protocol": _str, "payload": _str,
        "batch": {"type": ["integer", "null"], "minimum": 1},
        "concurrency": {"type": ["integer", "null"], "minimum": 1},
        "rate_rps": _num,
        "latency_p50_ms": _num, "latency_p95_ms": _num, "latency_p99_ms": _num,
        "throughput_img_s": _num,
        "requests": _int, "errors": {"type": "integer", "minimum": 0},
        "repeats": _int, "windows_used": _int,
        "stable": {"type": ["boolean", "null"]},
        "spread": _num,
        "server_stats": {"type": ["object", "null"]},
        "memory": {
            "type": "object",
            "properties": {"rss_mb": _num, "rss_of": _str, "gpu_mem_mb": _num},
            "required": ["rss_mb", "rss_of", "gpu_mem_mb"],
        },
        "weights": {"type": "string"},
        "available": {"type": "boolean"},
        "note": _str,
        "params": {"type": "object"},
    },
    "additionalProperties": True,
}


def validate_record(rec: dict) -> None:
    """Raise jsonschema.ValidationError when `rec` does not follow RECORD_SCHEMA."""
    import jsonschema

    jsonschema.validate(rec, RECORD_SCHEMA)


def make_record(experiment: str, run_id: str = "", *, kind: str = "load", server: str = "", weights: str = "",
                memory: dict | None = None, params: dict | None = None, **fields) -> dict:
    """A record with every schema field present; unknown measurements stay null."""
    rec = {
        "schema_version": SCHEMA_VERSION, "run_id": run_id, "experiment": experiment, "kind": kind,
        "timestamp": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "server": server, "backend": None, "engine": None, "provider": None, "protocol": None, "payload": None,
        "batch": None, "concurrency": None, "rate_rps": None,
        "latency_p50_ms": None, "latency_p95_ms": None, "latency_p99_ms": None, "throughput_img_s": None,
        "requests": None, "errors": 0, "repeats": None, "windows_used": None, "stable": None, "spread": None,
        "server_stats": None, "memory": memory or {"rss_mb": None, "rss_of": None, "gpu_mem_mb": None},
        "weights": weights, "available": True, "note": None, "params": params or {},
    }
    rec.update(fields)
    return rec


# --- memory ----------------------------------------------------------------------------------------

def memory_snapshot(pid: int | None = None, label: str | None = None) -> dict:
    """RSS of `pid` (default: this process) via psutil, plus GPU memory used via NVML when importable."""
    import psutil

    rss = None
    try:
        rss = round(psutil.Process(pid or os.getpid()).memory_info().rss / 2**20, 1)
        if pid:  # a server may fork workers (LitServe): count its children too
            rss += round(sum(c.memory_info().rss for c in psutil.Process(pid).children(recursive=True)) / 2**20, 1)
    except Exception:
        pass
    gpu = None
    nv = nvml()
    if nv is not None:
        try:
            gpu = round(sum(nv.nvmlDeviceGetMemoryInfo(nv.nvmlDeviceGetHandleByIndex(i)).used
                            for i in range(nv.nvmlDeviceGetCount())) / 2**20, 1)
        except Exception:
            gpu = None
    return {"rss_mb": rss, "rss_of": label or ("client process" if not pid else f"pid {pid}"), "gpu_mem_mb": gpu}


# --- runs ------------------------------------------------------------------------------------------

def new_run_id(name: str = "bench") -> str:
    return f"{_dt.datetime.now().strftime('%Y%m%d-%H%M%S')}-{name}"


# records measured in this process, not by a server: the in-process engine, the client's own work
LOCAL_SERVERS = ("in-process", "client")


def served_by_of(records) -> str | None:
    """The machine(s) that served `records`, for a figure derived from them: one name, or each distinct one."""
    machines = list(dict.fromkeys((r.get("params") or {}).get("served_by") for r in records))
    if not machines or not all(machines):
        return None  # an input names no machine: neither can the figure
    return "; ".join(machines)


class Run:
    """`results/<run-id>/`: records.jsonl + environment.json; `add()` validates and persists each record."""

    def __init__(self, run_id: str | None = None, root: Path | str | None = None, name: str = "bench",
                 weights: str | None = None):
        self.run_id = run_id or new_run_id(name)
        self.dir = Path(root or results_dir()) / self.run_id
        self.dir.mkdir(parents=True, exist_ok=True)
        self.records: list[dict] = load_records(self.dir) if (self.dir / "records.jsonl").exists() else []
        env_path = self.dir / "environment.json"
        if env_path.exists():
            self.environment = json.loads(env_path.read_text())
        else:
            self.environment = environment_fingerprint(weights if weights is not None else _settings_weights())
            atomic_write(env_path, json.dumps(self.environment, indent=2))

    @property
    def weights(self) -> str:
        return self.environment.get("weights", "")

    def record(self, experiment: str, **fields) -> dict:
        """Build, validate and persist one record; returns it."""
        fields.setdefault("weights", self.weights)
        rec = make_record(experiment, self.run_id, **fields)
        return self.add(rec)

    def add(self, rec: dict) -> dict:
        rec = json.loads(json.dumps(rec, default=_json_default))
        rec["run_id"] = self.run_id
        params = rec.setdefault("params", {})
        if not params.get("served_by") and rec.get("server") in LOCAL_SERVERS:
            from servelab.bench.servers.handle import this_machine

            params["served_by"] = this_machine()  # the engine, or the client, ran in this process
        validate_record(rec)
        self.records.append(rec)
        atomic_write(self.dir / "records.jsonl", "".join(json.dumps(r) + "\n" for r in self.records))
        return rec

    def dataframe(self, experiment: str | None = None):
        return records_frame([r for r in self.records if experiment is None or r["experiment"] == experiment])


def _json_default(o):
    import numpy as np

    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def _settings_weights() -> str:
    """The label of the weights the settings select: what a run measures unless told otherwise."""
    from servelab.config import Settings
    from servelab.model.weights import weights_label

    return weights_label(Settings.from_env())


def resolve_run_dir(run: str | Path, root: Path | str | None = None) -> Path:
    """A run id (under the results folder) or a path to a run folder or a records.jsonl file."""
    p = Path(run)
    if p.is_file():
        return p.parent
    if p.is_dir():
        return p
    q = Path(root or results_dir()) / str(run)
    if q.is_dir():
        return q
    raise FileNotFoundError(f"no run {run!r}: not a folder, a records.jsonl, or a run id under {q.parent}")


def upgrade_record(rec: dict) -> dict:
    """A schema-1 record (server kind in `target`, counters in `server`) with today's field names."""
    if rec.get("schema_version") == 1 and "target" in rec:
        rec["server_stats"] = rec.pop("server", None)
        rec["server"] = rec.pop("target")
        rec["schema_version"] = SCHEMA_VERSION
    return rec


def load_records(run: str | Path, root: Path | str | None = None) -> list[dict]:
    d = resolve_run_dir(run, root)
    path = d / "records.jsonl"
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist")
    out = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if line.strip():
            try:
                out.append(upgrade_record(json.loads(line)))
            except json.JSONDecodeError as exc:
                raise InvalidValue(f"{path}:{n}: not a JSON record ({exc})") from None
    return out


def records_frame(records: list[dict]):
    """Records -> pandas DataFrame (nested server_stats/memory fields flattened as server_stats.*, memory.*)."""
    import pandas as pd

    if not records:
        return pd.DataFrame()
    return pd.json_normalize(records, max_level=1)
