"""`servelab` command line: export | serve | embed | triton … | bench … | dedup … | lab ….

Each command group lives next to the code it drives (servelab/<part>/cli.py); this file only wires them up
and turns expected failures into one line on stderr and a non-zero exit.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import typer

from servelab.errors import ServelabError

app = typer.Typer(help="servelab: serve OpenCLIP ViT-B/32 and measure it honestly.", no_args_is_help=True,
                  pretty_exceptions_enable=False, add_completion=False)


class CliError(ServelabError):
    """A failure the user can fix; printed as one line."""


@app.command()
def export(
    artifacts: Path | None = typer.Option(None, help="output folder (default SERVELAB_ARTIFACTS or ./artifacts)"),
    int8: bool = typer.Option(True, help="also write the int8 (dynamic quantization) variant"),
    force: bool = typer.Option(False, help="export even if a matching export exists"),
):
    """Export the image tower to ONNX (+ int8) with metadata, and check parity against torch."""
    from servelab.config import Settings
    from servelab.model.export import export as do_export
    from servelab.model.export import load_metadata
    from servelab.model.weights import weights_label

    settings = Settings.from_env(artifacts=artifacts)
    meta = load_metadata(settings)
    if not force and meta and meta["weights"] == weights_label(settings) and ("int8" in meta or not int8):
        typer.echo(f"up to date: {meta['path']} (weights: {meta['weights']}; use --force to re-export)")
        return
    meta = do_export(settings, int8=int8, log_fn=typer.echo)
    typer.echo(json.dumps({k: meta[k] for k in ("path", "weights", "opset", "sha256", "parity")}, indent=2))


@app.command()
def serve(
    host: str | None = typer.Option(None, help="bind address (default 127.0.0.1)"),
    port: int | None = typer.Option(None, help="port (default 8002)"),
    engine: str | None = typer.Option(None, help="torch | onnx | onnx-int8 | emulated (an emulated accelerator: "
                                                 "SERVELAB_DEVICE_PROFILE)"),
    provider: str | None = typer.Option(None, help="cpu | cuda | tensorrt"),
    threads: int | None = typer.Option(None, help="engine threads (0 = all cores)"),
    max_batch: int | None = typer.Option(None, help="micro-batcher max batch size"),
    max_delay_ms: float | None = typer.Option(None, help="micro-batcher max delay (ms)"),
    max_queue: int | None = typer.Option(None, help="images allowed to wait before 503"),
    workers: int | None = typer.Option(None, help="frontend processes on the port, each with its own engine "
                                                  "(default 1; also SERVELAB_WORKERS or WEB_CONCURRENCY)"),
    decode: str | None = typer.Option(None, help="where JPEG files are decoded: auto (the engine's device where the "
                                                 "engine is torch on cuda, else the CPU) | device (the torch engine's "
                                                 "device; refused by other engines) | cpu (the decode pool); default "
                                                 "auto, also SERVELAB_DECODE. /info says which is in force and why"),
):
    """Run the FastAPI embedding service (settings also from SERVELAB_* env)."""
    from servelab.config import Settings
    from servelab.service import run

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    run(Settings.from_env(host=host, port=port, engine=engine, provider=provider, threads=threads,
                          max_batch=max_batch, max_delay_ms=max_delay_ms, max_queue=max_queue, workers=workers,
                          decode=decode))


@app.command()
def embed(
    images: list[Path] = typer.Argument(..., help="image files"),
    mode: str = typer.Option("auto", help="local | remote | auto"),
    backend: str = typer.Option("fastapi", help="fastapi | triton-http | triton-grpc"),
    url: str | None = typer.Option(None, help="server URL"),
    payload: str = typer.Option("jpeg", help="jpeg | tensor"),
):
    """Embed image files and print one JSON line per image (path, first values, norm)."""
    import numpy as np

    from servelab.client import InferenceClient

    for p in images:
        if not p.is_file():
            raise CliError(f"{p}: no such file")
    with InferenceClient(mode=mode, backend=backend, url=url, payload=payload) as client:
        emb = client.embed_paths(images, progress=False)
        for p, e in zip(images, emb, strict=True):
            typer.echo(json.dumps({"path": str(p), "dim": len(e), "norm": round(float(np.linalg.norm(e)), 6),
                                   "head": [round(float(x), 5) for x in e[:4]], "mode": client.mode_used,
                                   "weights": client.weights}))


# Command groups and the extra each needs beyond the core install (`pip install "servelab[<extra>]"`).
GROUPS = {
    "triton": ("servelab.triton.cli", "triton", "Embedded tritonserver: stage the repository, up / down / status."),
    "bench": ("servelab.bench.cli", "bench", "Benchmarks that write result records."),
    "dedup": ("servelab.dedup.cli", "dedup", "Near-duplicate photo finder."),
    "lab": ("servelab.lab.cli", "notebooks", "Run the notebooks with papermill into result tables."),
}


def _needs_extra(name: str, extra: str, exc: ImportError, help_text: str) -> None:
    """A stand-in command that says which extra to install, so the rest of the CLI works without it."""

    def explain(ctx: typer.Context) -> None:
        raise CliError(f"`servelab {name}` needs the {exc.name} package: pip install \"servelab[{extra}]\"")

    app.command(name=name, help=f"(needs the {extra} extra) {help_text}", add_help_option=False,
                context_settings={"allow_extra_args": True, "ignore_unknown_options": True})(explain)


def _add_groups() -> None:
    import importlib

    for name, (module, extra, help_text) in GROUPS.items():
        try:
            group = importlib.import_module(module).app
            if name == "lab":
                from servelab.assignments.cli import add_commands as add_assignment_commands

                add_assignment_commands(group)
        except ImportError as exc:
            _needs_extra(name, extra, exc, help_text)
            continue
        app.add_typer(group, name=name, help=help_text)


def main() -> None:
    _add_groups()
    try:
        app()
    # ServelabError: every error servelab raises on purpose (InvalidValue, CannotRun, InferenceError, … derive from
    # it); OSError: a file or folder the user named. Anything else is a fault in servelab: its traceback is shown
    except (ServelabError, OSError) as exc:
        typer.echo(f"error: {exc}", err=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
