"""`servelab lab assignments` and `servelab lab grade`: hand out exercise notebooks, grade executed ones.

They belong to the lab's command group, but the lab package does not import assignments (assignments builds
on the lab): servelab.cli adds these commands to the `lab` group with `add_commands`.
"""

from __future__ import annotations

from pathlib import Path

import typer


def _say(text: str) -> None:
    typer.echo(text, err=True)


def assignments(
    out: Path = typer.Option(Path("results/assignments"), "--out", help="folder to write student/ and instructor/ into"),
    only: list[str] | None = typer.Option(None, "--only", help="notebook id(s), e.g. --only 04 (repeatable)"),
):
    """Student notebooks (solutions replaced by NotImplementedError) and instructor notebooks, ready to hand out."""
    from servelab.assignments.generate import build

    info = build(out, only=only)
    for name in info["notebooks"]:
        n = sum(r["notebook"] == name for r in info["exercises"])
        _say(f"{name}: {n} exercise(s)")
    if info["skipped"]:
        _say(f"no exercises (not handed out): {', '.join(info['skipped'])}")
    typer.echo(f"{len(info['exercises'])} exercises in {len(info['notebooks'])} notebooks -> "
               f"{info['out']}/student, {info['out']}/instructor")


def grade(
    folder: Path = typer.Argument(..., help="folder of student notebooks (executed, or use --execute)"),
    out: Path = typer.Option(Path("grades.csv"), "--out", help="CSV of exercise results per notebook"),
    execute: bool = typer.Option(False, "--execute", help="execute notebooks that have no outputs first (papermill)"),
    profile: str = typer.Option("smoke", help="parameters profile for --execute"),
    param: list[str] | None = typer.Option(None, "--param", "-p", help="key=value for --execute (repeatable)"),
):
    """Read (or execute) student notebooks and write each exercise's result to a CSV."""
    from servelab.assignments.grade import grade as do_grade
    from servelab.lab import params as lab_params

    parameters = {**lab_params.profile(profile), **lab_params.parse_params(param)} if execute else {}
    rows = do_grade(folder, out_csv=out, execute=execute, parameters=parameters, say=_say)
    passed = sum(r["passed"] for r in rows)
    typer.echo(f"{passed}/{len(rows)} exercises passed -> {out}")


def add_commands(lab_app: typer.Typer) -> None:
    lab_app.command()(assignments)
    lab_app.command()(grade)
