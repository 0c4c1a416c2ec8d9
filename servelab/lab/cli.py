"""`servelab lab …` commands: run the notebooks, list them, keep .py/.ipynb in sync, rewrite a report."""

from __future__ import annotations

from pathlib import Path

import typer

app = typer.Typer(no_args_is_help=True)


def _say(text: str) -> None:
    typer.echo(text, err=True)


@app.command()
def run(
    profile: str = typer.Option("default", help="smoke (seconds per notebook) | default (about 25–35 min on 2 cores) | full | gpu (batches to 256, clients to 128: with --device cuda or --place node)"),
    only: list[str] | None = typer.Option(None, "--only", help="notebook id(s) to run: --only 04, --only 04,05a (repeatable)"),
    param: list[str] | None = typer.Option(None, "--param", "-p", help="key=value for the notebooks' parameters cell (repeatable)"),
    place: str | None = typer.Option(None, help="where the servers run: local (embedded stack on loopback) | node (a GPU node running the docker-compose stacks); default: $SERVELAB_PLACE, else local"),
    run_id: str | None = typer.Option(None, help="results/<run-id>/ (default: timestamp-profile); an existing id is updated"),
    ports: str = typer.Option("auto", help="local stack ports: auto (configured if free, else free) | configured | free"),
    results: Path = typer.Option(None, help="results folder (default: $SERVELAB_RESULTS, else results/)"),
    progress_bar: bool = typer.Option(True, help="papermill's per-cell progress bar"),
    notebooks: Path = typer.Option(None, help="folder of NN_*.py/.ipynb notebooks (default ./notebooks; e.g. generated assignment notebooks)"),
    device: str = typer.Option("cpu", help="cpu | cuda: where the local stack and the in-process rows run (cuda: the service and Triton's encoder on this machine's GPU, the notebooks' in-process rows too)"),
    pin_cores: bool = typer.Option(False, "--pin-cores", help="pin the notebooks (the client) and the local stack's servers to separate cores where the OS allows; the report says which"),
):
    """Execute the lab notebooks with papermill into results/<run-id>/ and write report.md/.html."""
    from servelab.config import Settings
    from servelab.lab.places import default_place
    from servelab.lab.runner import run as do_run

    if device not in ("cpu", "cuda"):
        raise typer.BadParameter(f"--device must be cpu or cuda, got {device!r}")
    if profile == "gpu" and device == "cpu" and (place or default_place()) == "local":
        raise typer.BadParameter("the gpu profile measures a GPU: add --device cuda (this machine's GPU) or "
                                 "--place node")
    # the stack's servers and the notebook kernels are given the provider
    settings = Settings.from_env(provider="cuda" if device == "cuda" else None)

    state = do_run(profile=profile, only=only, params=param, place=place, run_id=run_id, ports=ports,
                   results_dir=results, say=_say, progress_bar=progress_bar, notebook_dir=notebooks,
                   pin_cores=pin_cores, settings=settings)
    ok = sum(e["status"] == "ok" for e in state["notebooks"])
    typer.echo(f"{ok}/{len(state['notebooks'])} notebooks ok -> {state['out_dir']}/report.md (and report.html)")


@app.command("list")
def list_notebooks():
    """The notebooks, in run order, with the parameters each one takes."""
    from servelab.lab import notebooks as nbs

    for py in nbs.discover():
        ipynb = nbs.ipynb_for(py)
        names = sorted(nbs.declared_parameters(ipynb)) if ipynb.exists() else ["(no .ipynb: run servelab lab sync)"]
        typer.echo(f"{nbs.notebook_id(py):4} {py.stem:36} {' '.join(names)}")


@app.command()
def sync(check: bool = typer.Option(False, "--check", help="only report notebooks out of sync (exit 1 if any)")):
    """Regenerate notebooks/*.ipynb (no outputs) from their jupytext .py sources."""
    from servelab.lab import notebooks as nbs

    if check:
        bad = nbs.out_of_sync()
        for b in bad:
            typer.echo(f"out of sync: {b}")
        if bad:
            raise typer.Exit(1)
        typer.echo("all notebooks in sync")
        return
    for path in nbs.sync():
        typer.echo(f"wrote {path}")


@app.command()
def report(run_dir: Path = typer.Argument(..., help="results/<run-id>")):
    """Rewrite report.md/.html of a run from what is on disk."""
    from servelab.lab.run_report import write_report

    if not (run_dir / "run.json").exists():
        raise FileNotFoundError(f"{run_dir}: not a lab run folder (no run.json)")
    typer.echo(str(write_report(run_dir)))

