"""What a lab notebook needs around the measurements: one `Step` per notebook that files its tables and
plots under this run's folder, tags every table row with the hardware and versions it ran on, reads this
run's records, and states plainly what was not run.

    from servelab.lab.step import Step
    step = Step("04", out_dir, place)
    step.table(df, "queue_delay")          # -> tables/04_queue_delay.csv + .md, shown in the notebook
    step.plot(fig, "latency_vs_throughput") # -> plots/04_latency_vs_throughput.png
    step.shows(f"... {step.ratio(rec)} ...") # the 'what this run shows' paragraph, numbers from this run;
                                           # step.ratio / step.versus / step.leader say a comparison and
                                           # remember its fields, which shows() stores with the headline
    grade(gain, margin=step.margin(), target=8)  # a lesson's word for a ratio (servelab.bench.report.grades)
    step.not_run("TensorRT engine build", "no GPU on this machine")

Measuring, record keeping and table formatting belong to servelab.bench; this module only files them.
"""

from __future__ import annotations

import contextlib
import warnings
from pathlib import Path

import pandas as pd

from servelab.config import CHECKOUT, checkout
from servelab.errors import CannotRun, InvalidValue
from servelab.fileio import atomic_write

# tqdm.auto falls back to text bars in a kernel without ipywidgets and warns each time: harmless noise here
warnings.filterwarnings("ignore", message="IProgress not found")


def where(place: str) -> str:
    """The comment every shown shell command carries: `# runs here` or `# runs on the GPU node`."""
    return {"here": "# runs here", "node": "# runs on the GPU node", "gpu": "# runs on the GPU node"}.get(place, f"# runs {place}")


def show_commands(place: str, *commands: str) -> None:
    """Display shell commands (shown, not run) headed by where they run."""
    text = "\n".join([where(place), *commands])
    _display_md(f"```bash\n{text}\n```")


def show_code(source, start: str | None = None, stop: str | None = None, lang: str = "python") -> None:
    """Display real source, read when the cell runs: a function, class or module (inspect.getsource) or a
    file path; optionally only from the first line containing `start` up to (not including) the next line
    containing `stop`. The lesson shows the code the lab runs, never a pasted copy that can drift."""
    import inspect

    if isinstance(source, (str, Path)):
        path = Path(source)
        text, title = path.read_text(), path.relative_to(CHECKOUT) if CHECKOUT and path.is_relative_to(CHECKOUT) else path
    else:
        text, title = inspect.getsource(source), f"{source.__module__}.{source.__qualname__}" \
            if hasattr(source, "__qualname__") else source.__name__
    lines = text.splitlines()
    if start is not None:
        first = next((i for i, line in enumerate(lines) if start in line), None)
        if first is None:
            raise InvalidValue(f"{title}: no line contains {start!r}")
        last = next((i for i in range(first + 1, len(lines)) if stop is not None and stop in lines[i]), len(lines))
        lines = lines[first:last]
    body = "\n".join(lines).rstrip()
    _display_md(f"`{title}`\n```{lang}\n{body}\n```")


def _display_md(text: str) -> None:
    try:
        from IPython.display import Markdown, display

        display(Markdown(text))
    except ImportError:  # outside Jupyter: plain text
        print(text)


class Step:
    def __init__(self, notebook: str, out_dir: str | Path, place: str = "local"):
        self.id = notebook
        self.place = place
        self.out_dir = Path(out_dir)
        if not self.out_dir.is_absolute():
            self.out_dir = (Path.cwd() / self.out_dir).resolve()
        for sub in ("tables", "plots", "logs"):
            (self.out_dir / sub).mkdir(parents=True, exist_ok=True)
        for sub in ("tables", "plots"):  # a rerun replaces this notebook's outputs: nothing stale survives
            for old in (self.out_dir / sub).glob(f"{self.id}_*"):
                old.unlink()
        self._not_run: list[dict] = []
        self._served_by: list[str] = []  # which machine(s) served the rows of the last frame
        self._run = None
        self._said: list[tuple] = []  # (finding, its sentence) said since the last headline
        self.machine_drift = self._measured_drift()

    def _measured_drift(self) -> float | None:
        """The drift the probe measured so far in this run (the lab runner probes before every notebook): the
        margin of this notebook's comparisons of figures measured apart, where it exceeds the floor; None without
        probes."""
        from servelab.bench.load.drift import drift, probe_values

        path = self.out_dir / "records.jsonl"
        return drift(probe_values(self.run.records)) if path.exists() else None

    # --- comparisons: said in words, remembered as fields for the headline -----------------------------
    def margin(self, interleaved: bool = False) -> float:
        """The smallest difference this notebook ranks (servelab.bench.report.margin with this run's drift): pass it
        to `grade` for a lesson's words."""
        from servelab.bench.report import margin

        return margin(interleaved, drift=self.machine_drift)

    def _say(self, finding) -> str:
        from servelab.bench.report import say

        text = say(finding)
        self._said.append((finding, text))
        return text

    def versus(self, name_a: str, a, name_b: str, b, **kw) -> str:
        """servelab.bench.report.versus with this run's margin; the comparison is remembered for `shows`."""
        from servelab.bench.report import versus_finding

        return self._say(versus_finding(name_a, a, name_b, b, drift=self.machine_drift, **kw))

    def ratio(self, rec, **kw) -> str:
        """servelab.bench.report.ratio_sentence for an interleaved A/B record; remembered for `shows`."""
        from servelab.bench.report import ratio_finding

        return self._say(ratio_finding(rec, **kw))

    def leader(self, named: dict, **kw) -> str:
        """servelab.bench.report.leader with this run's margin; remembered for `shows`."""
        from servelab.bench.report import leader_finding

        found = leader_finding(named, drift=self.machine_drift, **kw)
        return "nothing measured" if found is None else self._say(found)

    # --- environment -----------------------------------------------------------------------------
    @property
    def run(self):
        """This lab run as a bench `Run` (records.jsonl + environment.json in out_dir): pass it to experiments."""
        if self._run is None:
            from servelab.bench.results.records import Run

            self._run = Run(run_id=self.out_dir.name, root=self.out_dir.parent)
        return self._run

    @property
    def environment(self) -> dict:
        return self.run.environment

    def tags(self) -> dict:
        """`hardware` and `versions` columns for every table row (short form of the run's fingerprint)."""
        return fingerprint_tags(self.environment)

    def opts(self, load: dict):
        """Bench load options (servelab.bench.load.LoadOpts) from the profile's `load` knob."""
        from servelab.bench.load import LoadOpts

        return LoadOpts(**load)

    # --- outputs ---------------------------------------------------------------------------------
    def table(self, df: pd.DataFrame, name: str, caption: str | None = None, show: bool = True,
              measured: bool = True) -> pd.DataFrame:
        """Write (and show) a table; every row tagged with this machine's hardware and versions and, for
        `measured` rows, the machine that served the last frame's records (`served_by`)."""
        df = pd.DataFrame(df).copy()
        for k, v in self.tags().items():
            if k not in df.columns:
                df[k] = v
        if measured and "served_by" not in df.columns and len(self._served_by) == 1:  # the machine of the last frame's rows
            df["served_by"] = self._served_by[0]
        write_table(df, self.out_dir / "tables" / f"{self.id}_{name}", title=caption)
        if show:  # the CSV keeps hardware/versions on every row; on screen they are one caption line
            tags = self.tags()
            shown = df.drop(columns=[k for k, v in tags.items() if k in df.columns and (df[k] == v).all()])
            served = f" · served by {df['served_by'].iloc[0]}" if "served_by" in df.columns and len(df) and \
                (df["served_by"] == df["served_by"].iloc[0]).all() else ""
            shown = shown.drop(columns=["served_by"]) if served else shown
            _display_md((f"**{caption}**  \n" if caption else "") +
                        f"<small>notebook on {tags['hardware']}{served} · {tags['versions']}</small>")
            try:
                from IPython.display import display

                display(shown)
            except ImportError:
                print(shown.to_string())
        return df

    def plot(self, fig, name: str) -> Path:
        path = self.plot_path(name)
        fig.savefig(path, dpi=110, bbox_inches="tight")
        return path

    def plot_path(self, name: str) -> Path:
        """Where plot `name` of this notebook goes (for the bench's plot functions, which take a path)."""
        return self.out_dir / "plots" / f"{self.id}_{name}.png"

    def show_plot(self, path: Path | None) -> None:
        """Display a PNG a bench plot function wrote (None: it had nothing to draw)."""
        if path is None:
            return
        try:
            from IPython.display import Image, display

            display(Image(filename=str(path)))
        except ImportError:
            print(path)

    def records(self, **match) -> pd.DataFrame:
        """This run's records (records.jsonl), optionally filtered by equal fields, as a flat DataFrame."""
        from servelab.bench.results.records import records_frame

        return records_frame([r for r in self.run.records if all(r.get(k) == v for k, v in match.items())])

    def earlier(self, *notebooks: str) -> list[dict]:
        """Records that earlier notebooks of this lab run wrote (their experiments are named "<id>-…"): pass them
        to a sweep's `measured=` so a point they already took is used, not measured again. Outside a lab run
        (a notebook opened on its own; records from other sessions) there are none: the notebook measures."""
        import datetime as dt
        import json

        try:
            started = dt.datetime.fromisoformat(json.loads((self.out_dir / "run.json").read_text())["started"])
        except (OSError, ValueError, KeyError):
            return []
        started = started.astimezone()  # the runner writes local time; records carry UTC

        def this_run(r: dict) -> bool:
            try:
                return dt.datetime.fromisoformat(r["timestamp"]) >= started
            except (KeyError, TypeError, ValueError):
                return False

        return [r for r in self.run.records
                if str(r.get("experiment", "")).split("-", 1)[0] in notebooks and this_run(r)]

    def frame(self, records: list[dict], *columns: str) -> pd.DataFrame:
        """Records (as returned by bench experiments) -> DataFrame with these columns (missing ones empty).

        Which machine served the rows (their params.served_by) tags the tables made from them; at place=node,
        rows served by different machines (a server this notebook started next to one of the node's) also get
        a `served_by` column and a sentence saying the comparison is between machines as well as servers."""
        from servelab.bench.results.records import records_frame

        failed = [r for r in records if r.get("kind") in ("load", "raw") and not r.get("requests") and r.get("errors")]
        if failed:  # a server that never answered: stop here with its error, not later on an empty table
            r = failed[0]
            why = (r.get("error_examples") or ["no error text"])[0]
            raise CannotRun(f"{r.get('server')} ({r.get('experiment')}, batch {r.get('batch')}, concurrency "
                            f"{r.get('concurrency')}): all {r.get('errors')} requests failed: {why}")
        df = records_frame(list(records))
        machines = list(dict.fromkeys(r["params"]["served_by"] for r in records
                                      if (r.get("params") or {}).get("served_by")))
        self._served_by = machines
        out = df.reindex(columns=list(columns)) if columns else df
        if self.place == "node" and len(machines) > 1 and "params.served_by" in df.columns:
            out = out.assign(served_by=df["params.served_by"].values)
            _display_md(f"> **Served by different machines:** {'; '.join(machines)}. A server this notebook "
                        "started runs where the notebook runs, not on the node: these rows compare machines as "
                        "well as servers.")
        return out

    def shows(self, text: str) -> None:
        """The 'What this run shows' paragraph (built from this run's numbers by the notebook); also saved
        as tables/<id>_shows.md so the report carries it, and as this notebook's headline in the run's
        headlines.json with the fields of every comparison it states (the ones `versus`, `ratio` and `leader`
        said whose sentence it contains), so `servelab bench compare` can tell whether another run concluded the
        same. Where the notebook also measured the emulated accelerator, its ratios follow, labelled with the
        device's profile. The GPU reference run's figures for the same question
        (servelab.bench.results.reference) come after, labelled."""
        from servelab.bench.report.headlines import emulated_figures, emulated_findings, record_headline
        from servelab.bench.results.reference import reference_line

        emulated = emulated_findings(self.out_dir, self.id)
        text = " ".join(t for t in (text, emulated_figures(emulated)) if t)
        _display_md(f"**What this run shows.** {text}")
        atomic_write(self.out_dir / "tables" / f"{self.id}_shows.txt", text + "\n")
        stated = [f for f, said in self._said if said in text] + emulated
        self._said.clear()
        record_headline(self.out_dir, self.id, text, stated)
        reference = reference_line(self.id)
        if reference:  # beside the headline, never in it: another machine's figures, labelled as such
            _display_md(f"**On a GPU, for comparison (a reference run, not this one).** {reference}")

    def answer(self, text: str) -> None:
        """The answer to a 'predict first' question, built by the notebook from this run's numbers."""
        _display_md(f"**Answer from this run.** {text}")

    def not_run(self, what: str, why: str, instead: str = "") -> None:
        """Say plainly what this run did not do and why; collected into tables/<id>_not_run."""
        self._not_run.append({"not run": what, "why": why, "instead": instead, "place": self.place})
        _display_md(f"> **Not run here:** {what} — {why}." + (f" Instead: {instead}." if instead else ""))
        self.table(pd.DataFrame(self._not_run), "not_run", show=False, measured=False)

    def skip_unless(self, condition, what: str, why: str, instead: str = "") -> bool:
        """An optional step in one line: `if step.skip_unless(ready, "perf_analyzer", "no binary here"):` runs it
        when `condition` holds, else records "not run, because `why`" (not_run) and returns False."""
        if not condition:
            self.not_run(what, why, instead)
        return bool(condition)

    @contextlib.contextmanager
    def attempt(self, what: str, instead: str = "", errors: tuple = (RuntimeError, OSError)):
        """`with step.attempt("Triton's trace"):` an optional step that may fail for a reason of this machine (a
        missing binary, a server elsewhere): such an error is recorded as not run, with its message as the why."""
        try:
            yield
        except errors as exc:
            self.not_run(what, str(exc).strip() or type(exc).__name__, instead)


def run_checks(*paths: str, timeout: float = 300) -> pd.DataFrame:
    """Run the repository's own offline validation tests (e.g. tests/deploy/…) here with pytest and return
    one row per check: name, outcome (passed / failed / skipped) and pytest's message. Reuses the checks the
    containers work ships instead of re-implementing them in a notebook."""
    import importlib.util
    import subprocess
    import sys
    import tempfile
    import xml.etree.ElementTree as ET

    if importlib.util.find_spec("pytest") is None:
        raise CannotRun("these checks run with pytest, which is not installed here: "
                        "pip install -r requirements-test.txt (make lab and make test install it)")
    with tempfile.TemporaryDirectory() as tmp:
        xml = Path(tmp) / "checks.xml"
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={xml}",
                               *paths], cwd=checkout(), capture_output=True, text=True, timeout=timeout)
        if not xml.exists():
            raise CannotRun(f"pytest {' '.join(paths)} produced no report (exit {proc.returncode}): "
                            f"{(proc.stderr or proc.stdout).strip()[-300:]}")
        rows = []
        for case in ET.parse(xml).getroot().iter("testcase"):
            outcome, message = "passed", ""
            for tag in ("failure", "error", "skipped"):
                el = case.find(tag)
                if el is not None:
                    outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
                    message = (el.get("message") or "").splitlines()[0][:160] if el.get("message") else ""
            rows.append({"check": case.get("name"), "file": Path(case.get("classname", "").replace(".", "/")).name,
                         "outcome": outcome, "message": message})
    return pd.DataFrame(rows)


def write_table(df: pd.DataFrame, stem: Path, title: str | None = None) -> None:
    """CSV + Markdown next to each other, formatted by the bench package (temp + rename)."""
    from servelab.bench.report import frame_markdown

    stem = Path(stem)
    atomic_write(stem.with_suffix(".csv"), df.to_csv(index=False))
    atomic_write(stem.with_suffix(".md"), (f"_{title}_\n\n" if title else "") + frame_markdown(df))


def fingerprint_tags(env: dict) -> dict:
    """{'hardware': 'Intel Xeon … · 2 cores · no GPU', 'versions': 'onnxruntime 1.31.1 · … · weights …'}."""
    gpus = [g.get("name") for g in env.get("gpus") or [] if g.get("name")]
    cores = env.get("cpu_usable") or env.get("cpu_logical")
    hardware = f"{env.get('cpu_model', '?')} · {cores} cores · " + (", ".join(gpus) if gpus else "no GPU")
    v = env.get("versions") or {}
    keys = ("onnxruntime", "onnxruntime-gpu", "tritonclient", "nvidia-pytriton", "torch", "fastapi")
    versions = " · ".join(f"{k} {v[k]}" for k in keys if k in v)
    versions += f" · weights {env.get('weights', '?')} · git {str(env.get('git_sha') or '?')[:12]}"
    return {"hardware": hardware, "versions": versions}


def repo_path(*parts: str) -> Path:
    return checkout().joinpath(*parts)
