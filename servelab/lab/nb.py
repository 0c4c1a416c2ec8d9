"""What a lab notebook needs around the measurements: one `Step` per notebook that files its tables and
plots under this run's folder, tags every table row with the hardware and versions it ran on, reads this
run's records, and states plainly what was not run.

    from servelab.lab.nb import Step
    step = Step("04", out_dir, target)
    step.table(df, "queue_delay")          # -> tables/04_queue_delay.csv + .md, shown in the notebook
    step.plot(fig, "latency_vs_throughput") # -> plots/04_latency_vs_throughput.png
    step.shows(f"... {x:.1f} img/s ...")   # the 'what this run shows' paragraph, numbers from this run
    step.not_run("TensorRT engine build", "no GPU on this machine")

Measuring, record keeping and table formatting belong to servelab.bench; this module only files them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from servelab.config import REPO_ROOT


def where(place: str) -> str:
    """The comment every shown shell command carries: `# runs here` or `# runs on the GPU node`."""
    return {"here": "# runs here", "node": "# runs on the GPU node", "gpu": "# runs on the GPU node"}.get(place, f"# runs {place}")


def show_commands(place: str, *commands: str) -> str:
    """Display shell commands (not run) with where they run; returns the text."""
    text = "\n".join([where(place), *commands])
    _display_md(f"```bash\n{text}\n```")
    return text


def _display_md(text: str) -> None:
    try:
        from IPython.display import Markdown, display

        display(Markdown(text))
    except ImportError:  # outside Jupyter: plain text
        print(text)


class Step:
    def __init__(self, notebook: str, out_dir: str | Path, target: str = "local"):
        self.id = notebook
        self.target = target
        self.out_dir = Path(out_dir)
        if not self.out_dir.is_absolute():
            self.out_dir = (Path.cwd() / self.out_dir).resolve()
        for sub in ("tables", "plots"):
            (self.out_dir / sub).mkdir(parents=True, exist_ok=True)
        self._not_run: list[dict] = []
        self._env: dict | None = None

    # --- environment -----------------------------------------------------------------------------
    @property
    def environment(self) -> dict:
        """The run's fingerprint (environment.json written by the runner, else computed now)."""
        if self._env is None:
            path = self.out_dir / "environment.json"
            if path.exists():
                self._env = json.loads(path.read_text())
            else:
                from servelab.bench.records import fingerprint

                self._env = fingerprint()
                path.write_text(json.dumps(self._env, indent=2, default=str))
        return self._env

    def tags(self) -> dict:
        """`hardware` and `versions` columns for every table row (short form of the fingerprint)."""
        from servelab.bench.records import fingerprint_tags

        return fingerprint_tags(self.environment)

    # --- outputs ---------------------------------------------------------------------------------
    def table(self, df: pd.DataFrame, name: str, caption: str | None = None, show: bool = True) -> pd.DataFrame:
        from servelab.bench.tables import write_table

        df = pd.DataFrame(df).copy()
        for k, v in self.tags().items():
            if k not in df.columns:
                df[k] = v
        write_table(df, self.out_dir / "tables" / f"{self.id}_{name}", title=caption)
        if show:
            try:
                from IPython.display import display

                if caption:
                    _display_md(f"**{caption}**")
                display(df)
            except ImportError:
                print(df.to_string())
        return df

    def plot(self, fig, name: str) -> Path:
        path = self.out_dir / "plots" / f"{self.id}_{name}.png"
        fig.savefig(path, dpi=110, bbox_inches="tight")
        return path

    def records(self, **match) -> pd.DataFrame:
        """This run's records (records.jsonl), optionally filtered by equal fields, as a flat DataFrame."""
        from servelab.bench.records import load_records

        rows = [r for r in load_records(self.out_dir) if all(r.get(k) == v for k, v in match.items())]
        return pd.json_normalize(rows) if rows else pd.DataFrame()

    def shows(self, text: str) -> str:
        """The 'What this run shows' paragraph (built from this run's numbers by the notebook)."""
        _display_md(f"**What this run shows.** {text}")
        return text

    def not_run(self, what: str, why: str, instead: str = "") -> None:
        """Say plainly what this run did not do and why; collected into tables/<id>_not_run."""
        self._not_run.append({"not run": what, "why": why, "instead": instead, "target": self.target})
        _display_md(f"> **Not run here:** {what} — {why}." + (f" Instead: {instead}." if instead else ""))
        self.table(pd.DataFrame(self._not_run), "not_run", show=False)


def repo_path(*parts: str) -> Path:
    return REPO_ROOT.joinpath(*parts)
