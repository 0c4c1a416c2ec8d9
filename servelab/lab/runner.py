"""`servelab lab run`: execute the notebooks with papermill into results/<run-id>/ and write the report.

Order of a run: choose notebooks and parameters → (place local) export + stage + start the loopback stack →
execute each notebook in order (progress on the terminal; each executed notebook is saved cell by cell, so a
failure leaves it readable) → stop the stack → write report.md/.html — always, also after a failure, which
stops the run and names the notebook and the failing cell.

Rerunning with `--run-id <existing> --only 04` re-executes 04 into the same folder and refreshes the report.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servelab import config
from servelab.errors import InvalidValue, ServelabError
from servelab.fileio import atomic_write
from servelab.lab import notebooks as nbs
from servelab.lab import params as lab_params
from servelab.lab.places import check_place, default_place, node_endpoints, triton_models
from servelab.lab.run_report import failed_cell, write_report
from servelab.lab.session import HARNESS, HARNESS_KEYS

URL_KEYS = {"service_url", "triton_http_url", "triton_grpc_url", "triton_metrics_url", "triton_repository",
            "service_pid", "triton_pid"}


class NotebookFailed(ServelabError, RuntimeError):
    """A notebook raised; the message names the notebook, the cell, and where the partial results are."""


@dataclass
class RunPlan:
    run_id: str
    out_dir: Path
    profile: str
    place: str
    notebooks: list[Path]
    values: dict[str, Any]
    declared: dict[str, set[str]] = field(default_factory=dict)
    overrides: dict[str, Any] = field(default_factory=dict)  # --param values: win over profile and stack
    uses_servers: dict[str, bool] = field(default_factory=dict)  # notebooks whose code reads a server's endpoint

    @property
    def needs_stack(self) -> bool:
        return self.place == "local" and any(self.declared[p.stem] & URL_KEYS or self.uses_servers.get(p.stem)
                                             for p in self.notebooks)

    def injected(self, stem: str, values: dict[str, Any]) -> dict[str, Any]:
        """The parameters one notebook receives: those it declares by name, and `harness` (where it runs, the
        profile's load and switches: servelab.lab.session) when it declares that."""
        declared = self.declared[stem]
        out = lab_params.for_notebook(declared, values)
        if HARNESS in declared:
            out[HARNESS] = {k: values[k] for k in HARNESS_KEYS if k in values}
        return out


def _against(entry: dict) -> str:
    """", budget 150 s" or ", OVER its budget of 150 s" (nothing when the profile has no budgets)."""
    budget = entry.get("budget_s")
    if budget is None:
        return ""
    return f", budget {budget:.0f} s" if entry["seconds"] <= budget else f", OVER its budget of {budget:.0f} s"


def default_run_id(profile: str) -> str:
    return f"{dt.datetime.now().strftime('%Y%m%d-%H%M%S')}-{profile}"


def plan(profile: str = "default", only: list[str] | None = None, params: list[str] | None = None,
         place: str | None = None, run_id: str | None = None, results_dir: Path | None = None,
         notebook_dir: Path | None = None) -> RunPlan:
    """Validate everything the user typed before anything is started. `place` None: $SERVELAB_PLACE, else local
    (the node's JupyterLab sets it, so a run started there talks to the node's stacks)."""
    place = check_place(place or default_place())
    values = lab_params.profile(profile)
    overrides = lab_params.parse_params(params)
    paths = nbs.select(nbs.discover(notebook_dir), only)
    if not paths:
        raise FileNotFoundError(f"no notebooks found in {notebook_dir}")
    missing = [nbs.ipynb_for(p).name for p in paths if not nbs.ipynb_for(p).exists()]
    if missing:
        raise FileNotFoundError(f"{', '.join(missing)} missing: run `servelab lab sync` to generate them")
    declared = {p.stem: nbs.declared_parameters(nbs.ipynb_for(p)) for p in paths}
    known = set().union(*declared.values())
    if any(HARNESS in d for d in declared.values()):
        known |= set(HARNESS_KEYS)
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise InvalidValue(f"--param {', '.join(unknown)}: not a parameter of the selected notebooks "
                           f"(they take: {', '.join(sorted(known))})")
    run_id = run_id or default_run_id(profile)
    if not run_id.replace("-", "").replace("_", "").replace(".", "").isalnum():
        raise InvalidValue(f"--run-id {run_id!r}: use letters, digits, '-', '_' or '.'")
    out_dir = (Path(results_dir or config.results_dir()) / run_id).resolve()
    values.update(place=place, run_id=run_id, out_dir=str(out_dir), **triton_models(place))
    if place == "node":
        values.update(node_endpoints().as_params())
    values.update(overrides)
    return RunPlan(run_id=run_id, out_dir=out_dir, profile=profile, place=place, notebooks=paths,
                   values=values, declared=declared, overrides=overrides,
                   uses_servers={p.stem: nbs.uses_servers(nbs.ipynb_for(p)) for p in paths})


def _write_json(path: Path, data: dict) -> None:
    atomic_write(path, json.dumps(data, indent=2, default=str))


def _load_state(out_dir: Path) -> dict:
    path = out_dir / "run.json"
    if path.exists():
        try:
            return json.loads(path.read_text())
        except json.JSONDecodeError:
            pass
    return {}


def _failure(exc: Exception) -> dict:
    from papermill.exceptions import PapermillExecutionError

    if isinstance(exc, PapermillExecutionError):
        first = next((ln for ln in exc.source.splitlines() if ln.strip() and not ln.startswith("#")), "")
        evalue = (str(exc.evalue).strip().splitlines() or [""])[0][:300]
        return {"cell": exc.cell_index, "execution_count": exc.exec_count, "error": f"{exc.ename}: {evalue}",
                "cell_source": first.strip()[:120]}
    return {"cell": None, "error": f"{type(exc).__name__}: {exc}".strip()}


def _fingerprint(out_dir: Path, say: Callable[[str], None], settings: config.Settings) -> dict:
    """The environment fingerprint, written once per run as environment.json."""
    from servelab.fingerprint import environment_fingerprint
    from servelab.model.weights import weights_label

    path = out_dir / "environment.json"
    try:
        fp = environment_fingerprint(weights_label(settings))
    except Exception as exc:  # the report must still be written; say what is missing
        say(f"warning: no environment fingerprint ({type(exc).__name__}: {exc})")
        fp = {"error": f"fingerprint unavailable: {exc}"}
    _write_json(path, fp)
    return fp


def execute(p: RunPlan, ports: str = "auto", say: Callable[[str], None] = print,
            progress_bar: bool = True, pin_cores: bool = False, settings: config.Settings | None = None) -> dict:
    """Run the plan; returns the run state (also in run.json). Raises NotebookFailed after writing the report.
    `settings` (default: from the environment) choose the local stack's engines; the notebook kernels get their
    provider, and the CPU pinning, in their environment."""
    settings = settings or config.Settings.from_env()
    nbs.ensure_kernel()
    out_dir = p.out_dir
    for sub in ("notebooks", "tables", "plots", "logs"):
        (out_dir / sub).mkdir(parents=True, exist_ok=True)
    state = _load_state(out_dir)
    entries = {e["name"]: e for e in state.get("notebooks", [])}
    for path in p.notebooks:
        nb_id = nbs.notebook_id(path)
        entries[path.stem] = {"id": nb_id, "name": path.stem, "status": "pending",
                              "budget_s": lab_params.budget_s(p.profile, nb_id)}
    state.update(run_id=p.run_id, profile=p.profile, place=p.place, out_dir=str(out_dir),
                 started=dt.datetime.now().isoformat(timespec="seconds"), finished=None,
                 parameters={k: v for k, v in p.values.items() if k not in URL_KEYS})
    state["notebooks"] = sorted(entries.values(), key=lambda e: e["name"])

    def save():
        _write_json(out_dir / "run.json", state)

    say(f"lab run {p.run_id}: profile {p.profile}, place {p.place}, {len(p.notebooks)} notebook(s) -> {out_dir}")
    save()
    _fingerprint(out_dir, say, settings)
    if p.place == "node":
        state["unreachable"] = probe_endpoints(p, say)
    failed: NotebookFailed | None = None
    stopped = "run interrupted"
    try:
        with _stack(p, ports, say, settings) as stack_params, _pinned(stack_params, pin_cores, say) as pinning:
            state["cpu_pinning"] = pinning
            kernel_env = kernel_environment(settings, pinning)
            values = {**p.values, **stack_params, **p.overrides}
            state["endpoints"] = {k: v for k, v in values.items() if k in URL_KEYS}
            probe = _drift_probe(p, say)
            for i, path in enumerate(p.notebooks, 1):
                entry = entries[path.stem]
                probe(path.stem)
                ipynb = nbs.ipynb_for(path)
                output = out_dir / "notebooks" / ipynb.name
                injected = p.injected(path.stem, values)
                say(f"[{i}/{len(p.notebooks)}] {path.stem} …")
                shown = {k: ({n: x for n, x in v.items() if n not in URL_KEYS} if k == HARNESS else v)
                         for k, v in injected.items()}
                entry.update(status="running", output=str(output.relative_to(out_dir)), parameters=shown)
                save()
                t0 = time.monotonic()
                try:
                    nbs.execute(ipynb, output, injected, progress_bar=progress_bar, env=kernel_env)
                except Exception as exc:  # PapermillExecutionError, a dead kernel, …: report any failure
                    entry.update(status="failed", seconds=round(time.monotonic() - t0, 1), **_failure(exc))
                    save()
                    where = failed_cell(entry)
                    failed = NotebookFailed(f"notebook {path.stem} failed at {where}: {entry['error']} "
                                            f"(executed notebook: {output}; partial report: {out_dir / 'report.md'})")
                    say(f"[{i}/{len(p.notebooks)}] {path.stem} FAILED at {where}: {entry['error']}")
                    break
                entry.update(status="ok", seconds=round(time.monotonic() - t0, 1))
                entry.pop("error", None)
                entry.pop("cell", None)
                save()
                say(f"[{i}/{len(p.notebooks)}] {path.stem} ok ({entry['seconds']:.1f} s{_against(entry)})")
            probe("end")
    except Exception as exc:  # the stack did not start (or stop): say so in the report, then fail with it
        stopped = f"run stopped: {(str(exc).splitlines() or [type(exc).__name__])[0][:200]}"
        raise
    finally:
        for e in state["notebooks"]:
            if e["status"] in ("pending", "running"):
                e["status"] = "not run (" + ("run stopped after a failure" if failed else stopped) + ")"
        state["finished"] = dt.datetime.now().isoformat(timespec="seconds")
        save()
        report = write_report(out_dir)
        say(f"report: {report}")
    if failed:
        raise failed
    return state


PROBE_GAP_S = 30.0  # a probe closer than this to the last one is skipped


def _drift_probe(p: RunPlan, say: Callable[[str], None]) -> Callable[[str], None]:
    """A profile that produces results measures the machine's own speed (servelab.bench.load.drift) before each
    notebook and at the end, so figures measured at different moments can be judged against how far the machine
    alone moved; not again within PROBE_GAP_S of the last probe. Smoke runs and runs against a node (whose speed
    this machine cannot see) skip it."""
    load = p.values.get("load") or {}
    if p.place != "local" or load.get("quick", True):
        return lambda before: None
    from servelab.bench.load.drift import DriftProbe
    from servelab.bench.results.records import Run

    try:
        ref = DriftProbe()
    except Exception as exc:  # the run goes on; compare then says the drift is unknown
        say(f"warning: no drift probe ({type(exc).__name__}: {exc})")
        return lambda before: None

    last = [float("-inf")]

    def probe(before: str) -> None:
        # a notebook that measures nothing (00, 05b, 08) takes seconds: the probe before it still describes the
        # machine after it, and compare interpolates between the probes it finds by time
        if time.monotonic() - last[0] < PROBE_GAP_S:
            return
        run = Run(p.run_id, root=p.out_dir.parent)  # re-read each time: the notebooks appended records since
        rec = ref.record(run, before)
        last[0] = time.monotonic()
        say(f"  drift probe ({rec['note']}): {rec['throughput_img_s']:.1f} img/s")

    return probe


PROBES = {"service_url": "/healthz", "triton_http_url": "/v2/health/ready"}


def probe_endpoints(p: RunPlan, say: Callable[[str], None]) -> list[str]:
    """For place=node: say up front which servers the selected notebooks need but that do not answer."""
    from servelab.netutil import wait_http

    missing = []
    for key, path in PROBES.items():
        # a notebook names the endpoint as a parameter, or reads it from the harness when its code talks to servers
        users = [name for name, declared in p.declared.items()
                 if key in declared or (HARNESS in declared and p.uses_servers.get(name))]
        url = str(p.values.get(key, ""))
        if users and url and not wait_http(url.rstrip("/") + path, timeout=3.0):
            missing.append(key)
            say(f"warning: {key} {url} does not answer ({path}); {', '.join(users)} will fail — bring the stack up "
                "on the node (docker/compose.*.yaml) or open the SSH tunnel (notebook 00)")
    return missing


def kernel_environment(settings: config.Settings, pinning: str) -> dict[str, str]:
    """What a notebook kernel is given on top of this process's environment: the provider the run chose
    (`--device cuda`), which its in-process rows use, and how client and servers were placed on cores, which its
    CPU meters report (both read back by Settings.from_env in the kernel)."""
    from servelab.bench.load.cpu import PINNING_ENV

    return {"SERVELAB_PROVIDER": settings.provider, PINNING_ENV: pinning}


@contextlib.contextmanager
def _stack(p: RunPlan, ports: str, say: Callable[[str], None], settings: config.Settings):
    """Parameters the stack contributes: URLs of the loopback servers for local, nothing extra for node."""
    if not p.needs_stack:
        yield {}
        return
    from servelab.lab.stack import local_stack

    with local_stack(p.out_dir, ports=ports, say=say, settings=settings) as info:
        yield {**info.endpoints.as_params(), "triton_repository": info.triton_repository,
               "service_pid": info.pids["service"], "triton_pid": info.pids["triton"]}


@contextlib.contextmanager
def _pinned(stack_params: dict, enabled: bool, say: Callable[[str], None]):
    """--pin-cores: this process, and so every notebook kernel it starts (the client), on some cores and the local
    stack's servers on the others, where the OS allows; yields what was done (run.json and the report say it)."""
    from servelab.bench.load.cpu import NOT_PINNED, pinned

    if not enabled:
        yield NOT_PINNED
        return
    with pinned([stack_params.get("service_pid"), stack_params.get("triton_pid")]) as how:
        say(f"CPU pinning: {how}")
        yield how


def run(profile: str = "default", only: list[str] | None = None, params: list[str] | None = None,
        place: str | None = None, run_id: str | None = None, ports: str = "auto", results_dir: Path | None = None,
        say: Callable[[str], None] = print, progress_bar: bool = True, notebook_dir: Path | None = None,
        pin_cores: bool = False, settings: config.Settings | None = None) -> dict:
    p = plan(profile=profile, only=only, params=params, place=place, run_id=run_id, results_dir=results_dir,
             notebook_dir=notebook_dir)
    with _terminate_cleanly():
        return execute(p, ports=ports, say=say, progress_bar=progress_bar, pin_cores=pin_cores, settings=settings)


@contextlib.contextmanager
def _terminate_cleanly():
    """SIGTERM (`kill`, a CI timeout, a container stopping) ends the run the way Ctrl-C does: the stack it
    started is stopped and the report written. Python's default would exit at once and leave the servers
    running, holding their ports (and a server an A/B had paused, stopped for good)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminate(signum, frame):
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


__all__ = ["run", "plan", "execute", "RunPlan", "NotebookFailed"]
