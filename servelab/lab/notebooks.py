"""The lab's notebooks: discovery, `--only` selection, keeping `.py` sources and `.ipynb` in sync, and
executing one with papermill (the lab runner and the assignment grader both run notebooks through `execute`).

The jupytext percent-format `.py` file is the source of truth (reviewable diffs); the `.ipynb` next to it is
generated from it, committed without outputs, and is what papermill executes.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from servelab.config import checkout
from servelab.errors import InvalidValue
from servelab.fileio import atomic_write

KERNEL = "servelab"


def notebook_dir() -> Path:
    """The course's notebooks/ folder (they ship with the repository, not with the package)."""
    return checkout() / "notebooks"


def discover(directory: Path | None = None) -> list[Path]:
    """Every `NN*_…` lab notebook in order (00, 01, …, 05a, 05b, …): its `.py` source, or the `.ipynb` alone
    when a folder holds only notebooks (e.g. generated assignment notebooks)."""
    directory = Path(directory) if directory else notebook_dir()
    stems = {p.stem for p in directory.glob("[0-9][0-9]*_*.py")} | {p.stem for p in directory.glob("[0-9][0-9]*_*.ipynb")}
    return [directory / f"{s}.py" if (directory / f"{s}.py").exists() else directory / f"{s}.ipynb" for s in sorted(stems)]


def notebook_id(path: Path) -> str:
    """`04_triton_dynamic_batching.py` -> `04`; `05a_ort_optimisation.ipynb` -> `05a`."""
    return Path(path).stem.split("_", 1)[0]


def select(paths: list[Path], only: list[str] | None) -> list[Path]:
    """`--only 04 05` keeps 04 and both 05a/05b; an id that matches nothing is an error naming the choices."""
    if not only:
        return list(paths)
    chosen = []
    for want in [w.strip() for item in only for w in item.replace(",", " ").split()]:
        hits = [p for p in paths if notebook_id(p) == want or notebook_id(p).startswith(want)
                or p.stem == want or p.name == want]
        if not hits:
            ids = ", ".join(notebook_id(p) for p in paths)
            raise InvalidValue(f"--only {want}: no such notebook (choose from {ids})")
        chosen += [p for p in hits if p not in chosen]
    return [p for p in paths if p in chosen]


def ipynb_for(py: Path) -> Path:
    return Path(py).with_suffix(".ipynb")


def _cells(nb) -> list[tuple]:
    return [(c.cell_type, c.source.strip(), tuple(c.get("metadata", {}).get("tags", ()))) for c in nb.cells]


def _to_notebook(py: Path):
    import jupytext

    nb = jupytext.read(py)
    nb.metadata.setdefault("kernelspec", {"name": KERNEL, "display_name": f"{KERNEL} (.venv)", "language": "python"})
    nb.metadata.setdefault("jupytext", {})["formats"] = "ipynb,py:percent"
    for i, cell in enumerate(nb.cells):
        # deterministic ids: regenerating an unchanged notebook gives an identical file (no churn in git)
        cell.id = f"c{i:02d}-" + hashlib.sha1(cell.source.encode()).hexdigest()[:8]
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    return nb


def out_of_sync(paths: list[Path] | None = None) -> list[str]:
    """Names of notebooks whose `.ipynb` is missing, differs from its `.py`, or carries outputs."""
    import nbformat

    bad = []
    for py in [p for p in (paths if paths is not None else discover()) if p.suffix == ".py"]:
        ipynb = ipynb_for(py)
        if not ipynb.exists():
            bad.append(f"{ipynb.name} (missing)")
            continue
        have = nbformat.read(ipynb, as_version=4)
        if _cells(have) != _cells(_to_notebook(py)):
            bad.append(f"{ipynb.name} (differs from {py.name})")
        elif any(c.get("outputs") for c in have.cells if c.cell_type == "code"):
            bad.append(f"{ipynb.name} (has outputs)")
    return bad


def sync(paths: list[Path] | None = None) -> list[Path]:
    """Regenerate each `.ipynb` from its `.py` (no outputs); returns the files written."""
    import jupytext

    written = []
    for py in [p for p in (paths if paths is not None else discover()) if p.suffix == ".py"]:
        written.append(atomic_write(ipynb_for(py), jupytext.writes(_to_notebook(py), fmt="ipynb")))
    return written


def declared_parameters(ipynb: Path) -> set[str]:
    """Names assigned in the notebook's `parameters` cell (papermill's own inspection)."""
    import papermill

    return set(papermill.inspect_notebook(str(ipynb)).keys())


# a session's endpoint read in a code cell (`lab.service_url`, `lab.triton_model`, `lab.attach(`): the notebook talks
# to the run's servers, so a local run starts its stack
_SERVER_USE = re.compile(r"\blab\.(service_\w+|triton_\w+|attach\()")


def uses_servers(ipynb: Path) -> bool:
    """Whether the notebook's code reads a server endpoint from its lab session (servelab.lab.session)."""
    import nbformat

    nb = nbformat.read(ipynb, as_version=4)
    return any(_SERVER_USE.search(c.source) for c in nb.cells if c.cell_type == "code")


def execute(src: Path, dst: Path, parameters: dict, *, cwd: Path | None = None, progress_bar: bool = False,
            env: dict[str, str] | None = None) -> None:
    """Run notebook `src` with papermill on the servelab kernel into `dst`, with `parameters` injected (only
    ones it declares: see servelab.lab.params.for_notebook). `dst` is saved after every cell, so a failure
    leaves it readable up to the failing cell; the failure is papermill's exception. Runs in `cwd` (default:
    the notebook's folder); `env`: variables the kernel process gets on top of this one's environment."""
    import papermill

    ensure_kernel()
    Path(dst).parent.mkdir(parents=True, exist_ok=True)
    papermill.execute_notebook(str(src), str(dst), parameters=parameters, kernel_name=KERNEL,
                               cwd=str(cwd or Path(src).parent), progress_bar=progress_bar,
                               request_save_on_cell_execute=True, extra_arguments=["--IPKernelApp.log_level=ERROR"],
                               kernel_manager_class=_kernel_manager(env or {}))


def _kernel_manager(env: dict[str, str]):
    """A kernel manager whose kernel process starts with this process's environment plus `env`: how the lab
    runner hands its kernels settings (a child's environment, built explicitly) without changing its own."""
    import os

    from jupyter_client import AsyncKernelManager

    class KernelManager(AsyncKernelManager):
        async def _async_pre_start_kernel(self, **kw):
            kw["env"] = {**os.environ, **kw.get("env", {}), **{k: str(v) for k, v in env.items()}}
            return await super()._async_pre_start_kernel(**kw)

    return KernelManager


def ensure_kernel(name: str = KERNEL) -> None:
    """Register this interpreter as the `servelab` Jupyter kernel if `make setup` has not (idempotent)."""
    import subprocess
    import sys

    from jupyter_client.kernelspec import KernelSpecManager

    if name in KernelSpecManager().find_kernel_specs():
        return
    subprocess.run([sys.executable, "-m", "ipykernel", "install", "--sys-prefix", "--name", name,
                    "--display-name", f"{name} (.venv)"], check=True, capture_output=True)
