"""Build and run servelab's service image on a real Docker engine, timing what a deployment lesson reads: how
long a build takes (from scratch and from the layer cache), how big the image is, and how long a container
takes from `docker run` to answering, to being ready, and to Docker calling it healthy.

    from servelab.deploy.containers import engine_version, build_image, service_container, exec_healthcheck

    if engine_version():                                   # an engine answered, not merely a socket file
        b = build_image("servelab:cpu-0.1.0", "docker/Dockerfile")             # Build: seconds, size_mb, standin
        with service_container(b.tag, name="nb02-svc", models="artifacts") as c:   # docker run -d; rm -f on exit
            start = c.wait_started(on_alive=lambda: exec_healthcheck(c.name, test))   # StartTimes
            start.readyz_s, start.healthy_s, start.during_loading.passed

Three questions, three answers: the container *started* (`docker run` returned, the process runs), the
service is *alive* (`/healthz` answers as soon as uvicorn listens), it is *ready* (`/readyz` answers 200
once the model has run a real batch). Docker's own `healthy` comes from the image's HEALTHCHECK, which runs
only every `--interval` seconds: it lags readiness by up to one interval, which is why the times are taken
from the endpoints themselves and Docker's probe log is read beside them.

Every call goes through the `docker` CLI (the engine's own client); a failure raises DockerError with the
command's last output lines.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import yaml

from servelab.config import checkout
from servelab.errors import InvalidValue, ServelabError

CONTAINER_PORT = 8002  # the port the service image listens on (docker/Dockerfile: SERVELAB_PORT)


class DockerError(ServelabError, RuntimeError):
    """A docker command failed; the message carries its exit code and last output lines."""


def docker(*args: str, timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess:
    """Run `docker <args>` from the checkout (the build context); DockerError on a non-zero exit when `check`."""
    try:
        out = subprocess.run(["docker", *args], cwd=checkout(), capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError as exc:
        raise DockerError("no docker CLI on this machine: install Docker (docs.docker.com/get-docker)") from exc
    if check and out.returncode != 0:
        raise DockerError(f"docker {' '.join(args[:3])} … exited {out.returncode}: "
                          f"{(out.stderr or out.stdout).strip()[-1500:]}")
    return out


def engine_version(timeout: float = 15) -> str | None:
    """The Docker engine's version when one answers this CLI, else None. The engine is asked (`docker version`),
    because a CLI or a socket file can be there with no engine behind it."""
    if not shutil.which("docker"):
        return None
    try:
        out = subprocess.run(["docker", "version", "-f", "{{.Server.Version}}"], capture_output=True, text=True,
                             timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
    return (out.stdout.strip() or None) if out.returncode == 0 else None


# --- images ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Build:
    """One timed `docker build`: from the layer cache (`cached`) or from scratch (`--no-cache`)."""

    tag: str
    dockerfile: str
    seconds: float
    cached: bool
    image_id: str
    size_mb: float           # as `docker images` counts it (10^6 bytes), all layers
    standin: str | None      # what the base image stands in for, when it is a stand-in (SERVELAB_STANDIN)
    kept: bool = True        # False: the image was removed after measuring (a throwaway cold build)


def build_image(tag: str, dockerfile: str, *, cached: bool = True, keep: bool = True, build_args: Mapping | None = None,
                context: str | Path | None = None, timeout: float = 1800) -> Build:
    """`docker build -f dockerfile -t tag context` timed. `cached=False` adds `--no-cache` (every layer rebuilt,
    packages downloaded again). `keep=False` removes `tag` after reading its size: time a cold build under a
    throwaway tag without replacing the image the rest of the lesson runs."""
    flags = [x for k, v in (build_args or {}).items() for x in ("--build-arg", f"{k}={v}")]
    t0 = time.perf_counter()
    docker("build", "-q", *([] if cached else ["--no-cache"]), "-f", dockerfile, "-t", tag, *flags,
           str(context or "."), timeout=timeout)
    seconds = time.perf_counter() - t0
    info = image_info(tag)
    if not keep:
        docker("image", "rm", tag, check=False, timeout=120)
    return Build(tag=tag, dockerfile=dockerfile, seconds=round(seconds, 2), cached=cached, image_id=info["id"],
                 size_mb=info["size_mb"], standin=info["standin"], kept=keep)


def base_image(dockerfile: str | Path) -> str:
    """The image a Dockerfile starts from (its first FROM), e.g. python:3.11.14-slim-bookworm."""
    path = Path(dockerfile)
    path = path if path.is_absolute() else checkout() / path
    for line in path.read_text().splitlines():
        words = line.split()
        if words and words[0].upper() == "FROM":
            return next(w for w in words[1:] if not w.startswith("--"))
    raise InvalidValue(f"{dockerfile}: no FROM line")


def image_info(tag: str) -> dict:
    """{'id', 'size_mb', 'standin', 'healthcheck'} of a local image: standin from the SERVELAB_STANDIN its base
    sets (or None); healthcheck the image's HEALTHCHECK ({'test', 'interval_s', 'start_period_s', 'retries'},
    or None)."""
    import json

    out = docker("image", "inspect", "-f", "{{.Id}}\t{{.Size}}\t{{json .Config}}", tag, timeout=60).stdout
    image_id, size, config = out.split("\t", 2)
    config = json.loads(config) or {}
    standin = next((e.split("=", 1)[1] for e in config.get("Env") or [] if e.startswith("SERVELAB_STANDIN=")), None)
    hc = config.get("Healthcheck") or None
    health = {"test": hc.get("Test"), "interval_s": hc.get("Interval", 30e9) / 1e9,
              "start_period_s": hc.get("StartPeriod", 0) / 1e9, "retries": hc.get("Retries", 3)} if hc else None
    return {"id": image_id, "size_mb": round(int(size) / 1e6, 1), "standin": standin or None, "healthcheck": health}


def image_layers(tag: str, below: str | None = None) -> list[dict]:
    """The image's layers, newest first: {'size_mb', 'step'} (the Dockerfile instruction that made it). With
    `below` (the base image), only the layers the Dockerfile added on top of it."""
    def history(t: str) -> list[dict]:
        out = docker("history", "--no-trunc", "--human=false", "--format", "{{.Size}}\t{{.CreatedBy}}", t,
                     timeout=60).stdout
        rows = [line.split("\t", 1) for line in out.splitlines() if line.strip()]
        return [{"size_mb": round(int(size) / 1e6, 1), "step": _instruction(step)} for size, step in rows]

    layers = history(tag)
    return layers[:len(layers) - len(history(below))] if below else layers


# --- containers --------------------------------------------------------------------------------------------

@dataclass
class StartTimes:
    """Seconds from `docker run` to each answer, and what Docker's own probe said meanwhile."""

    run_s: float                      # `docker run -d` returned: the container exists and its process started
    healthz_s: float | None           # first /healthz 200: alive (uvicorn listens; the model may still load)
    readyz_s: float | None            # first /readyz 200: ready (the model has run a real batch)
    healthy_s: float | None           # Docker's status first seen `healthy` (None: not waited for, or never)
    status_at_ready: str              # Docker's health status when /readyz first answered 200
    probes: list[dict] = field(default_factory=list)  # Docker's probe log: at_s (after start), exit_code, output
    during_loading: object = None     # what `on_alive` returned, called once while alive and not yet ready
    ready_at_first_alive: bool = False  # /readyz was already 200 when /healthz first answered (no gap seen)
    unhealthy_seen: bool = False      # Docker called it unhealthy on the way: loading outlasted start_period + retries


@dataclass
class ServiceContainer:
    """A service container started by `service_container`: its name, the host port it is published on."""

    name: str
    tag: str
    port: int
    started: float = 0.0  # time.monotonic() just before `docker run`
    run_s: float = 0.0    # how long `docker run -d` took

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def state(self) -> dict:
        """Docker's view: {'status': running | exited | …, 'health': starting | healthy | unhealthy | '',
        'exit_code', 'started_at'}."""
        out = docker("inspect", "-f", "{{.State.Status}}\t{{if .State.Health}}{{.State.Health.Status}}{{end}}\t"
                     "{{.State.ExitCode}}\t{{.State.StartedAt}}", self.name, timeout=30).stdout.strip()
        status, health, code, started_at = out.split("\t")
        return {"status": status, "health": health, "exit_code": int(code), "started_at": started_at}

    def probe_log(self) -> list[dict]:
        """Docker's last health probes (it keeps five): seconds after the container started, exit code, output."""
        import json

        out = docker("inspect", "-f", "{{.State.StartedAt}}\t{{json .State.Health}}", self.name, timeout=30).stdout
        started_at, health = out.strip().split("\t", 1)
        t0 = _instant(started_at)
        log = (json.loads(health) or {}).get("Log") or []
        return [{"at_s": round((_instant(p["Start"]) - t0).total_seconds(), 2), "exit_code": p["ExitCode"],
                 "output": (p.get("Output") or "").strip()[-200:]} for p in log]

    def logs(self, tail: int = 30) -> str:
        out = docker("logs", "--tail", str(tail), self.name, check=False, timeout=30)
        return (out.stdout + out.stderr).strip()

    def wait_started(self, *, timeout: float = 180, wait_healthy: bool = True, every: float = 0.1,
                     on_alive: Callable[[], object] | None = None) -> StartTimes:
        """Poll /healthz and /readyz from the host until ready (then Docker's status until `healthy`, when
        `wait_healthy`); `on_alive()` runs once, the first time /healthz answers while /readyz does not.
        DockerError when the container exits or `timeout` passes, with its last log lines."""
        healthz_s = readyz_s = None
        during, gap_seen = None, False
        with httpx.Client(timeout=2.0) as http:
            while readyz_s is None:
                self._check_running(timeout)
                alive = healthz_s is not None or _ok(http, f"{self.url}/healthz")
                now = self._elapsed()
                if alive and healthz_s is None:
                    healthz_s = now
                if alive:
                    if _ok(http, f"{self.url}/readyz"):
                        readyz_s = self._elapsed()
                        break
                    if not gap_seen:
                        gap_seen = True
                        during = on_alive() if on_alive else None
                        continue
                time.sleep(every)
        status_at_ready = self.state()["health"]
        healthy_s, unhealthy = None, status_at_ready == "unhealthy"
        if wait_healthy:  # an `unhealthy` container turns healthy again at its next probe that passes
            while True:
                st = self._check_running(timeout)
                unhealthy = unhealthy or st["health"] == "unhealthy"
                if st["health"] in ("healthy", ""):  # "": the image has no HEALTHCHECK
                    healthy_s = self._elapsed() if st["health"] == "healthy" else None
                    break
                time.sleep(0.5)
        return StartTimes(run_s=self.run_s, healthz_s=_r(healthz_s), readyz_s=_r(readyz_s), healthy_s=_r(healthy_s),
                          status_at_ready=status_at_ready, probes=self.probe_log(), during_loading=during,
                          ready_at_first_alive=not gap_seen, unhealthy_seen=unhealthy)

    def _elapsed(self) -> float:
        return time.monotonic() - self.started

    def _check_running(self, timeout: float) -> dict:
        st = self.state()
        if st["status"] != "running":
            raise DockerError(f"{self.name} is {st['status']} (exit {st['exit_code']}):\n{self.logs()}")
        if self._elapsed() > timeout:
            raise DockerError(f"{self.name} not ready after {timeout:.0f} s (health {st['health'] or 'none'}):\n"
                              f"{self.logs()}")
        return st


def run_args(tag: str, *, name: str, models: str | Path, port: int, env: Mapping | None = None,
             checkpoint: str | Path | None = None) -> list[str]:
    """The `docker run` arguments of the service as docker/compose.02-service-cpu.yaml runs it: detached, the
    export mounted read-only at /models, the service's port published on the host's loopback only."""
    args = ["run", "-d", "--name", name, "-p", f"127.0.0.1:{port}:{CONTAINER_PORT}",
            "-v", f"{Path(models).resolve()}:/models:ro"]
    if checkpoint:
        args += ["-v", f"{Path(checkpoint).resolve()}:/opt/servelab-checkpoint/model.pt:ro",
                 "-e", "SERVELAB_CHECKPOINT=/opt/servelab-checkpoint/model.pt"]
    for k, v in (env or {}).items():
        args += ["-e", f"{k}={v}"]
    return [*args, tag]


def weights_env(settings) -> dict:
    """The weights settings the image's preflight compares with the mounted export's (it refuses a mismatch)."""
    return {"SERVELAB_SEED": settings.seed, **({"SERVELAB_PRETRAINED": settings.pretrained} if settings.pretrained else {})}


@contextlib.contextmanager
def service_container(tag: str, *, name: str, models: str | Path, port: int | None = None, env: Mapping | None = None,
                      checkpoint: str | Path | None = None) -> Iterator[ServiceContainer]:
    """Start the service image (`run_args`) on a free loopback port; the container is removed on leaving."""
    from servelab.netutil import free_port

    port = port or free_port()
    docker("rm", "-f", name, check=False, timeout=60)  # a leftover of an interrupted run with this name
    c = ServiceContainer(name=name, tag=tag, port=port)
    try:
        c.started = time.monotonic()
        docker(*run_args(tag, name=name, models=models, port=port, env=env, checkpoint=checkpoint), timeout=120)
        c.run_s = round(c._elapsed(), 2)
        yield c
    finally:
        docker("rm", "-f", name, check=False, timeout=60)


# --- a compose healthcheck, run by hand --------------------------------------------------------------------

@dataclass(frozen=True)
class ProbeRun:
    """One run of a healthcheck's test inside a container: passed is exit code 0 within the timeout."""

    exit_code: int | None  # None: it ran past its timeout
    seconds: float
    output: str

    @property
    def passed(self) -> bool:
        return self.exit_code == 0


def healthcheck_command(healthcheck) -> list[str]:
    """The command Docker runs for a compose `healthcheck:` (YAML text or mapping, with or without the key):
    ["CMD", prog, args…] -> [prog, args…]; ["CMD-SHELL", line] or a plain string -> ["/bin/sh", "-c", line]."""
    hc = yaml.safe_load(healthcheck) if isinstance(healthcheck, str) else healthcheck
    hc = hc.get("healthcheck", hc) if isinstance(hc, Mapping) else hc
    test = hc.get("test") if isinstance(hc, Mapping) else None
    if isinstance(test, str) and test.strip():
        return ["/bin/sh", "-c", test]
    if isinstance(test, list) and len(test) > 1 and test[0] == "CMD":
        return [str(x) for x in test[1:]]
    if isinstance(test, list) and len(test) == 2 and test[0] == "CMD-SHELL":
        return ["/bin/sh", "-c", str(test[1])]
    raise InvalidValue(f"a healthcheck test is [\"CMD\", program, args…], [\"CMD-SHELL\", \"line\"] or a string; "
                       f"got {test!r}")


def exec_healthcheck(container: str, healthcheck, timeout: float = 10) -> ProbeRun:
    """Run a compose healthcheck's test inside a running container (`docker exec`), as Docker's probe would."""
    argv = healthcheck_command(healthcheck)
    t0 = time.perf_counter()
    try:
        out = docker("exec", container, *argv, check=False, timeout=timeout)
    except subprocess.TimeoutExpired:
        return ProbeRun(exit_code=None, seconds=round(time.perf_counter() - t0, 2), output=f"timed out after {timeout} s")
    return ProbeRun(exit_code=out.returncode, seconds=round(time.perf_counter() - t0, 2),
                    output=(out.stdout + out.stderr).strip()[-300:])


# --- helpers -----------------------------------------------------------------------------------------------

def _ok(http: httpx.Client, url: str) -> bool:
    try:
        return http.get(url).status_code == 200
    except httpx.HTTPError:
        return False


def _instant(text: str) -> dt.datetime:
    """Docker's RFC 3339 times carry nanoseconds; Python reads microseconds."""
    head, _, frac = text.rstrip("Z").partition(".")
    return dt.datetime.fromisoformat(f"{head}.{(frac + '000000')[:6]}+00:00" if frac else f"{head}+00:00")


def _instruction(created_by: str) -> str:
    """A history entry as the Dockerfile line that made it: `RUN /bin/sh -c pip …` -> `RUN pip …`."""
    text = " ".join(created_by.split())
    for noise in ("/bin/sh -c #(nop) ", " # buildkit"):
        text = text.replace(noise, "")
    return text.replace("RUN /bin/sh -c ", "RUN ", 1).removeprefix("/bin/sh -c ")


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 2)
