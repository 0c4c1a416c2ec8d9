"""The bodies of `servelab lab assignments` and `servelab lab grade` (the commands are declared in
servelab/lab/cli.py, which stays the lab's command list)."""

from __future__ import annotations

from pathlib import Path

import typer


def _say(text: str) -> None:
    typer.echo(text, err=True)


def assignments(out: Path, only: list[str] | None = None) -> None:
    from servelab.assignments.generate import build

    info = build(out, only=only)
    for name in info["notebooks"]:
        n = sum(r["notebook"] == name for r in info["exercises"])
        _say(f"{name}: {n} exercise(s)")
    if info["skipped"]:
        _say(f"no exercises (not handed out): {', '.join(info['skipped'])}")
    typer.echo(f"{len(info['exercises'])} exercises in {len(info['notebooks'])} notebooks -> "
               f"{info['out']}/student, {info['out']}/instructor")


def grade(folder: Path, out: Path, execute: bool = False, profile: str = "smoke",
          param: list[str] | None = None) -> None:
    from servelab.assignments.grade import grade as do_grade
    from servelab.lab import params as lab_params

    parameters = {**lab_params.profile(profile), **lab_params.parse_params(param)} if execute else {}
    rows = do_grade(folder, out_csv=out, execute=execute, parameters=parameters, say=_say)
    passed = sum(r["passed"] for r in rows)
    typer.echo(f"{passed}/{len(rows)} exercises passed -> {out}")
