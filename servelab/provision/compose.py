"""Read docker/compose.*.yaml without Docker: variable interpolation as compose does it, published ports.

Used by provisioning (two stacks that publish the same node port cannot be up together) and by the offline
tests. Interpolation follows the compose specification: ${VAR}, ${VAR:-default}, ${VAR-default},
${VAR:?error}, ${VAR?error}, ${VAR:+alt}, $VAR and $$ (a literal $).
"""

from __future__ import annotations

import re
from pathlib import Path

from servelab.errors import InvalidValue, ServelabError

_VAR = re.compile(r"\$(?:(?P<escaped>\$)|\{(?P<braced>[^}]*)\}|(?P<named>[A-Za-z_][A-Za-z0-9_]*))")
_BRACED = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?+])(?P<arg>.*))?$", re.S)


class InterpolationError(ServelabError, ValueError):
    pass


def interpolate(value: str, env: dict[str, str]) -> str:
    def sub(m: re.Match) -> str:
        if m.group("escaped"):
            return "$"
        if m.group("named"):
            return env.get(m.group("named"), "")
        b = _BRACED.match(m.group("braced"))
        if not b:
            raise InterpolationError(f"invalid interpolation ${{{m.group('braced')}}}")
        name, op, arg = b.group("name"), b.group("op"), b.group("arg") or ""
        val = env.get(name)
        unset_or_empty = val is None or (op or "").startswith(":") and val == ""
        if op in ("-", ":-"):
            return interpolate(arg, env) if (val is None if op == "-" else unset_or_empty) else val
        if op in ("?", ":?"):
            if val is None if op == "?" else unset_or_empty:
                raise InterpolationError(f"required variable {name} is missing: {arg}")
            return val
        if op in ("+", ":+"):
            return interpolate(arg, env) if not (val is None if op == "+" else unset_or_empty) else ""
        return val or ""

    return _VAR.sub(sub, value)


def interpolate_tree(node, env: dict[str, str]):
    if isinstance(node, str):
        return interpolate(node, env)
    if isinstance(node, list):
        return [interpolate_tree(v, env) for v in node]
    if isinstance(node, dict):
        return {k: interpolate_tree(v, env) for k, v in node.items()}
    return node


def load(path: Path | str, env: dict[str, str] | None = None, interpolated: bool = True) -> dict:
    import yaml

    doc = yaml.safe_load(Path(path).read_text())
    if not isinstance(doc, dict):
        raise InvalidValue(f"{path}: not a compose mapping")
    return interpolate_tree(doc, env or {}) if interpolated else doc


def published_ports(doc: dict) -> dict[int, str]:
    """Host port -> service name, from `ports:` (short "[ip:]host:container[/proto]" or long syntax) and
    network_mode: host services' known listeners are not included (they publish nothing themselves)."""
    out = {}
    for name, svc in (doc.get("services") or {}).items():
        for p in svc.get("ports") or []:
            if isinstance(p, dict):
                host = p.get("published")
            else:
                parts = str(p).split("/")[0].split(":")
                host = parts[-2] if len(parts) >= 2 else None
            if host not in (None, ""):
                out[int(host)] = name
    return out


def container_ports(doc: dict) -> dict[str, list[int]]:
    out = {}
    for name, svc in (doc.get("services") or {}).items():
        ports = []
        for p in svc.get("ports") or []:
            ports.append(int(p["target"]) if isinstance(p, dict) else int(str(p).split("/")[0].split(":")[-1]))
        out[name] = ports
    return out
