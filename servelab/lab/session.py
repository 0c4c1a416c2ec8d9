"""Where a lesson runs, in one call: the endpoints, model names, place, output folder, `Step` and load options a
notebook needs, so that its parameters cell holds only the knobs a student may change.

    # %% tags=["parameters"]
    harness = {}              # filled by `servelab lab run` ({}: this place's defaults)
    batch_sizes = [1, 8]

    # %%
    from servelab.lab.session import session
    lab = session("04", globals())
    lab.triton_http_url, lab.triton_model, lab.triton_headers   # the place's Triton and its repository key
    lab.load                  # LoadOpts of the run's profile (the default profile's when opened on its own)
    lab.step.table(...)       # servelab.lab.step.Step of this notebook
    if lab.step.skip_unless(lab.extra_servers, "a torch service", "the smoke profile skips extra servers"): ...

`servelab lab run` passes one `harness` dict (HARNESS_KEYS) to every notebook that declares it; a notebook opened by
hand gets {} and this place's defaults (servelab.lab.places.place_defaults). A caller that injects those names one by
one instead (papermill with `-p triton_http_url …`, the assignments' grader) is heard too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from servelab.errors import InvalidValue
from servelab.lab.places import place_defaults

# the parameter a notebook declares to receive the harness (the runner's name for it)
HARNESS = "harness"
ENDPOINT_KEYS = ("service_url", "triton_http_url", "triton_grpc_url", "triton_metrics_url", "triton_model",
                 "triton_jpeg_model")
# profile knobs that choose harness work (servers started, builds), not what a lesson measures
PROFILE_SWITCHES = ("extra_servers", "service_batching_baseline", "cold_build")


@dataclass(frozen=True)
class Lab:
    """One notebook's view of where it runs; built by `session`."""

    notebook: str
    place: str
    out_dir: Path
    profile: str
    service_url: str
    triton_http_url: str
    triton_grpc_url: str
    triton_metrics_url: str
    triton_model: str
    triton_jpeg_model: str
    triton_repository: Path  # the running Triton's model repository (the lab run passes its staged one)
    service_pid: int | None
    triton_pid: int | None
    load_knob: dict = field(repr=False)
    switches: dict = field(repr=False)

    @cached_property
    def step(self):
        """This notebook's `Step` (tables, plots, records, 'not run')."""
        from servelab.lab.step import Step

        return Step(self.notebook, self.out_dir, self.place)

    @cached_property
    def load(self):
        """How each point is measured (servelab.bench.load.LoadOpts), from the run's profile."""
        from servelab.bench.load import LoadOpts

        return LoadOpts(**self.load_knob)

    @property
    def extra_servers(self) -> bool:
        return bool(self.switches["extra_servers"])

    @property
    def service_batching_baseline(self) -> bool:
        return bool(self.switches["service_batching_baseline"])

    @property
    def cold_build(self) -> bool:
        return bool(self.switches["cold_build"])

    @property
    def triton_headers(self) -> dict:
        """The header Triton's repository, trace and log APIs ask for (servelab.triton.access)."""
        from servelab.triton import access

        return access.headers(self.triton_http_url)

    @property
    def triton_address(self) -> str:
        """host:port of Triton's HTTP endpoint, as tritonclient takes it."""
        return self.triton_http_url.split("://")[-1]

    def attach(self, server: str, **kw):
        """A bench handle on one of this place's running servers: "triton-http" or "fastapi"."""
        from servelab.lab.places import attach

        if server == "fastapi":
            return attach("fastapi", self.service_url, pid=self.service_pid, **{"payload": "tensor", **kw})
        return attach(server, self.triton_http_url, model=self.triton_model, pid=self.triton_pid,
                      **{"payload": "tensor", **kw})


def _defaults() -> dict:
    """What a notebook opened on its own uses for the run-wide knobs: the default profile's."""
    from servelab.lab.params import profile

    return profile("default")


def session(notebook: str, namespace: dict | None = None) -> Lab:
    """Everything about where notebook `notebook` runs, from the runner's `harness` in `namespace` (the notebook's
    globals()) and any HARNESS_KEYS name injected there on its own; what neither gives is this place's default
    (results/interactive, the default profile's load)."""
    namespace = namespace or {}
    given = {k: namespace[k] for k in HARNESS_KEYS if k in namespace and namespace[k] not in ("", None)}
    given.update(namespace.get(HARNESS) or {})
    unknown = set(given) - set(HARNESS_KEYS)
    if unknown:
        raise InvalidValue(f"harness: unknown key(s) {', '.join(sorted(unknown))} (known: {', '.join(HARNESS_KEYS)})")
    names = {"place": given.get("place", ""), "out_dir": given.get("out_dir", ""),
             **{k: given.get(k, "") for k in ENDPOINT_KEYS}}
    names.update(place_defaults(names))
    defaults = _defaults()
    return Lab(notebook=notebook, place=names["place"], out_dir=Path(names["out_dir"]),
               profile=str(given.get("profile") or defaults["profile"]),
               **{k: names[k] for k in ENDPOINT_KEYS},
               triton_repository=Path(given.get("triton_repository") or "../models"),
               service_pid=int(given.get("service_pid") or 0) or None,
               triton_pid=int(given.get("triton_pid") or 0) or None,
               load_knob=dict(given.get("load") or defaults["load"]),
               switches={k: given.get(k, defaults[k]) for k in PROFILE_SWITCHES})


# what the runner puts in `harness` (and what `--param` may set for a notebook that declares it)
HARNESS_KEYS = ("place", "out_dir", "run_id", "profile", "load", *ENDPOINT_KEYS, "triton_repository", "service_pid",
                "triton_pid", *PROFILE_SWITCHES)
