"""Regenerate requirements.lock and every requirements file from pyproject.toml's dependencies.

    python scripts/lock.py            # resolve new requirements (locked versions kept), write lock + files
    python scripts/lock.py --upgrade  # resolve everything afresh at the newest versions that fit
    python scripts/lock.py --check    # exit 1 if a generated file no longer matches the lock (no network)

The lock is pip's own resolution (`pip install --dry-run --report`) of every extra at once, so one version of
each package serves every set, plus a second resolution of the GPU set for the GPU machine's Python and platform,
which adds torch's CUDA libraries. Each requirements file is then the closure of its roots inside the lock,
computed from the packages' own metadata: nothing is kept by hand, and nothing can drift.

Hashes: every line carries the sha256 of each wheel its target machines can get (pip accepts several per
requirement and checks them whenever any are given). torch 2.13.0 has two builds under one version: the CPU
build (`+cpu`, from PyTorch's CPU index, which `make setup` and the images add with --extra-index-url; a
find-links folder serves the same file where that index cannot be reached) and the CUDA build on PyPI. A CPU set lists only the
CPU build's hash, so a machine that cannot reach a CPU torch fails on the hash instead of installing the CUDA
build without its CUDA libraries; the GPU set lists only the CUDA build, with all of its CUDA wheels.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from urllib.parse import unquote, urlparse

from packaging.requirements import Requirement
from packaging.tags import Tag, compatible_tags, cpython_tags
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "requirements.lock"
# Pinned with the resolution: an unpinned torch pulls a newer CUDA build and several GB of CUDA packages.
TORCH = "torch==2.13.0"
EVERYTHING = ".[lab,lab-gpu,test,chameleon]"
GPU_ROOTS = ".[lab-gpu]"
# Named in a comment, not as an option line: pip asks every index for every package, and an unreachable one costs
# its retries each time (half an hour for the CPU lab set), so the installer adds it where it answers.
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
PYPI_SIMPLE = "https://pypi.org/simple"
# Packages whose one version has a CPU build (local label +cpu) and a CUDA build (no label, on PyPI).
TWO_BUILDS = {"torch"}


@dataclass(frozen=True)
class Target:
    """A machine a requirements file is installed on: its Python, its C library, and the torch build it takes."""

    python: str  # the oldest patch release in use: Requires-Python is checked against it
    glibc: tuple[int, int]  # the newest manylinux the machine accepts
    build: str  # "cpu" or "cuda"

    @cached_property
    def tags(self) -> frozenset[Tag]:
        version = tuple(int(p) for p in self.python.split(".")[:2])
        platforms = self.platforms
        return frozenset([*cpython_tags(version, platforms=platforms),
                          *compatible_tags(version, f"cp{version[0]}{version[1]}", platforms)])

    @property
    def platforms(self) -> list[str]:
        major, newest = self.glibc
        many = [f"manylinux_{major}_{minor}_x86_64" for minor in range(newest, 4, -1)]
        return many + ["manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64", "linux_x86_64"]

    def environment(self) -> dict[str, str]:
        """Marker values on this machine (packaging's names)."""
        short = ".".join(self.python.split(".")[:2])
        return {"implementation_name": "cpython", "implementation_version": self.python, "os_name": "posix",
                "platform_machine": "x86_64", "platform_python_implementation": "CPython", "platform_release": "",
                "platform_system": "Linux", "platform_version": "", "python_full_version": self.python,
                "python_version": short, "sys_platform": "linux", "extra": ""}

    def pip_options(self) -> list[str]:
        """pip's options for resolving as this machine would, from any machine (pip needs --target with them)."""
        out = ["--python-version", self.python, "--only-binary=:all:", "--implementation", "cp"]
        for p in self.platforms:
            out += ["--platform", p]
        return out

    def takes(self, wheel: str) -> bool:
        """Whether this machine can install this wheel file, and it is of this machine's torch build."""
        name, version, _, tags = parse_wheel_filename(wheel)
        if name in TWO_BUILDS and (version.local == "cpu") != (self.build == "cpu"):
            return False
        return bool(tags & self.tags)


# The CPU lab, CI and the CPU images (Debian 12, Python 3.11); the GPU machine and docker/Dockerfile.gpu
# (Ubuntu 24.04, Python 3.12).
CPU_LAB = Target("3.11.7", (2, 36), "cpu")
GPU_NODE = Target("3.12.3", (2, 39), "cuda")
# The GPU image's CPU rehearsal (docker/Dockerfile.gpu on a Debian 12 stand-in base, Python 3.11): the same set.
GPU_REHEARSAL = Target("3.11.2", (2, 36), "cuda")
TARGETS = (CPU_LAB, GPU_NODE, GPU_REHEARSAL)

# file -> (what it is for, roots, sets whose packages it leaves out because it is installed on top of them,
#          the machines it is installed on)
OUTPUTS: dict[str, tuple[str, list[str], list[str], list[Target]]] = {
    "requirements.txt": ("The CPU lab: `make setup` installs it with --no-deps, then servelab itself.",
                         ["servelab[lab]"], [], [CPU_LAB]),
    "requirements-test.txt": ("What the tests add on top of requirements.txt (`make test`) or requirements-gpu.txt "
                              "(docker/Dockerfile.gpu).", ["servelab[lab,test]"],
                              # on top of either: neither torch's CUDA libraries nor anything a lab set has
                              ["requirements.txt", "requirements-gpu.txt"],
                              [CPU_LAB, GPU_NODE]),
    "requirements-gpu.txt": ("The lab on a GPU machine or node image (docker/Dockerfile.gpu; Python 3.12, and 3.11 in its rehearsal): onnxruntime-gpu "
                             "instead of onnxruntime, torch's CUDA build and every CUDA wheel it needs, pinned.",
                             ["servelab[lab-gpu]"], [], [GPU_NODE, GPU_REHEARSAL]),
    "requirements-chameleon.txt": ("python-chi for provisioning a Chameleon node, on top of requirements.txt.",
                                   ["servelab[lab,chameleon]"], ["requirements.txt"], [CPU_LAB]),
    "docker/requirements-service.txt": ("What the CPU service image needs (docker/Dockerfile): no torch, the "
                                        "image serves an existing ONNX export.", ["servelab[cpu]"], [], [CPU_LAB]),
    "docker/requirements-export.txt": ("The CPU image's optional build-time export stage (docker/Dockerfile).",
                                       ["servelab[cpu,export]"], [], [CPU_LAB]),
    "docker/requirements-triton.txt": ("Pillow for the preprocess_jpeg python model in NVIDIA's Triton image "
                                       "(docker/Dockerfile.triton).", ["pillow"], [], [GPU_NODE, CPU_LAB]),
}
HEADER = "# Generated by scripts/lock.py from requirements.lock: do not edit; change pyproject.toml and rerun.\n"


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def resolve(constraints: list[Path], roots: list[str], target: Target | None = None) -> dict:
    """pip's resolution of the roots, as {name: {name, version, requires_dist, wheels}}; for `target` when given,
    else for this machine. `wheels` maps each file pip picked to its sha256."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        pinned = []
        for c in constraints:
            pinned += ["-c", str(c)]
        where = ["--target", str(Path(tmp) / "t"), *target.pip_options()] if target else []
        subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
                        "--disable-pip-version-check", "--report", str(report), *where, *pinned, *roots, TORCH],
                       cwd=ROOT, check=True)
        items = json.loads(report.read_text())["install"]
    out = {}
    for item in items:
        meta = item["metadata"]
        name = canonicalize_name(meta["name"])
        if name == "servelab":
            continue
        url = item["download_info"]["url"]
        sha = item["download_info"].get("archive_info", {}).get("hashes", {}).get("sha256")
        if sha is None and url.startswith("file://"):
            sha = _file_sha256(Path(unquote(urlparse(url).path)))
        # a local build label (torch 2.13.0+cpu) names one build; the version every machine needs has none
        out[name] = {"name": meta["name"], "version": meta["version"].split("+")[0],
                     "requires_dist": meta.get("requires_dist", []), "cuda_requires": [],
                     "wheels": {unquote(url.rsplit("/", 1)[-1]): sha}}
    return out


def merge_gpu(packages: dict, gpu: dict) -> dict:
    """The lock: the CPU resolution plus what the GPU resolution adds; requirements only torch's CUDA build has
    are kept apart, so the CPU sets leave its CUDA libraries out."""
    for name, p in gpu.items():
        if name not in packages:
            packages[name] = p
            continue
        own = packages[name]
        if own["version"] != p["version"]:
            raise SystemExit(f"the GPU resolution picked {name} {p['version']}, the lock has {own['version']}")
        own["cuda_requires"] = [r for r in p["requires_dist"] if r not in own["requires_dist"]]
        own["wheels"].update(p["wheels"])
    return packages


def index_wheels(name: str, version: str) -> dict[str, str]:
    """{wheel file: sha256} of this release on PyPI that any target machine can install."""
    request = urllib.request.Request(f"{PYPI_SIMPLE}/{name}/",
                                     headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        files = json.load(response)["files"]
    out = {}
    for f in files:
        if not f["filename"].endswith(".whl") or f.get("yanked"):
            continue
        try:
            _, v, _, _ = parse_wheel_filename(f["filename"])
        except InvalidWheelFilename:  # old releases with names pip no longer accepts either
            continue
        if str(v) == version and any(t.takes(f["filename"]) for t in TARGETS):
            out[f["filename"]] = f["hashes"]["sha256"]
    return out


def add_index_hashes(packages: dict) -> None:
    with ThreadPoolExecutor(8) as pool:
        found = pool.map(lambda p: index_wheels(p["name"], p["version"]), packages.values())
        for p, wheels in zip(packages.values(), found, strict=True):
            p["wheels"].update(wheels)


def project_requires() -> list[str]:
    """servelab's own requirements (core and every extra), read from pyproject.toml."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(project.get("dependencies", []))
    for extra, items in project.get("optional-dependencies", {}).items():
        reqs += [f"{r}; extra == '{extra}'" for r in items]
    return reqs


def write_lock(packages: dict) -> None:
    lines = ["# The one lock: every package of every servelab set, at the version tested together.",
             "# Generated by `python scripts/lock.py` (pip's resolver); the requirements*.txt files derive from it.",
             "# Each line keeps the package's own requirements (and those only its CUDA build has) and the sha256",
             "# of every wheel a target machine can get, so the sets can be derived without a network.", ""]
    for name in sorted(packages):
        p = packages[name]
        lines.append(f"{p['name']}=={p['version']}")
        lines += [f"    # requires: {r}" for r in p["requires_dist"]]
        lines += [f"    # requires (cuda build): {r}" for r in p["cuda_requires"]]
        lines += [f"    # wheel: {f} sha256={h}" for f, h in sorted(p["wheels"].items())]
    LOCK.write_text("\n".join(lines) + "\n")


def read_lock() -> dict:
    packages, current = {}, None
    for line in LOCK.read_text().splitlines():
        if not line.strip() or (line.startswith("#")):
            continue
        for prefix, key in (("    # requires: ", "requires_dist"), ("    # requires (cuda build): ", "cuda_requires")):
            if line.startswith(prefix):
                current[key].append(line.removeprefix(prefix))
                break
        else:
            if line.startswith("    # wheel: "):
                wheel, sha = line.removeprefix("    # wheel: ").split(" sha256=")
                current["wheels"][wheel] = sha
                continue
            name, version = line.split("==")
            current = packages[canonicalize_name(name)] = {"name": name, "version": version, "requires_dist": [],
                                                           "cuda_requires": [], "wheels": {}}
    return packages


def closure(packages: dict, roots: list[str], target: Target) -> dict[str, set[str]]:
    """{name: the extras asked of it} for every package the roots need on `target`, following each package's
    requirements and extras."""
    env = target.environment()
    own = {"servelab": {"name": "servelab", "version": "", "requires_dist": project_requires(), "cuda_requires": []}}
    seen: set[tuple[str, str]] = set()
    names: dict[str, set[str]] = {}
    todo = [Requirement(r) for r in roots]
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        extras = sorted(req.extras) or [""]
        for extra in extras + [""]:
            if (name, extra) in seen:
                continue
            seen.add((name, extra))
            if name != "servelab":
                names.setdefault(name, set()).update({extra} - {""})
            pkg = own.get(name) or packages[name]
            requires = pkg["requires_dist"] + (pkg["cuda_requires"] if target.build == "cuda" else [])
            for text in requires:
                dep = Requirement(text)
                if dep.marker is None or dep.marker.evaluate({**env, "extra": extra}):
                    todo.append(dep)
    return names


def requirement_lines(package: dict, targets: list[Target], extras: set[str] = frozenset()) -> str:
    """`name[extras]==version` with a --hash for each wheel the targets can get, in pip's requirements-file syntax.
    The extras that packages of the set ask for are named: pip's --require-hashes mode refuses `uvicorn[standard]`
    asked by a dependency as unpinned when the line pins only `uvicorn`."""
    hashes = sorted({h for f, h in package["wheels"].items() if any(t.takes(f) for t in targets)})
    if not hashes:
        raise SystemExit(f"no wheel of {package['name']} {package['version']} in requirements.lock fits "
                         f"{', '.join(f'Python {t.python}' for t in targets)} on Linux x86_64: "
                         "run python scripts/lock.py")
    named = f"[{','.join(sorted(extras))}]" if extras else ""
    lines = [f"{package['name']}{named}=={package['version']}", *(f"    --hash=sha256:{h}" for h in hashes)]
    return " \\\n".join(lines) + "\n"


def rendered(packages: dict) -> dict[str, str]:
    asked = {f: [closure(packages, roots, t) for t in targets] for f, (_, roots, _, targets) in OUTPUTS.items()}
    sets = {f: set().union(*closures) for f, closures in asked.items()}
    out = {}
    for f, (why, _, on_top_of, targets) in OUTPUTS.items():
        names = sets[f] - set().union(*(sets[o] for o in on_top_of))
        index = ""
        if "torch" in names and all(t.build == "cpu" for t in targets):
            index = ("# torch is listed with its CPU build's hash only: install with --extra-index-url "
                     f"{TORCH_CPU_INDEX}\n# (`make setup` adds it where it answers) or a find-links folder holding that wheel.\n")
        extras = {n: set().union(*(c.get(n, set()) for c in asked[f])) for n in names}
        body = "".join(requirement_lines(packages[n], targets, extras[n]) for n in sorted(names))
        out[f] = HEADER + f"# {why}\n" + index + body
    return out


def unhashed(text: str) -> list[str]:
    """Requirement lines of a requirements file that carry no --hash (pip checks none unless every one has one)."""
    missing = []
    for line in text.replace("\\\n", " ").splitlines():
        line = line.split("#", 1)[0].strip()
        if line and not line.startswith("-") and "--hash=" not in line:
            missing.append(line.split()[0])
    return missing


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only compare the generated files with the lock")
    parser.add_argument("--upgrade", action="store_true", help="do not keep the locked versions")
    parser.add_argument("--constraint", "-c", type=Path, action="append", default=[],
                        help="more version constraints for the resolution (a pip constraints file)")
    args = parser.parse_args()
    if not args.check:
        keep = []
        if LOCK.exists() and not args.upgrade:
            keep_file = Path(tempfile.mkdtemp()) / "locked.txt"
            keep_file.write_text("".join(f"{p['name']}=={p['version']}\n" for p in read_lock().values()))
            keep = [keep_file]
        packages = resolve(keep + args.constraint, [EVERYTHING])
        pins = Path(tempfile.mkdtemp()) / "cpu-resolution.txt"
        pins.write_text("".join(f"{p['name']}=={p['version']}\n" for p in packages.values()))
        packages = merge_gpu(packages, resolve([pins, *args.constraint], [GPU_ROOTS], GPU_NODE))
        add_index_hashes(packages)
        write_lock(packages)
    stale, problems = [], []
    for f, text in rendered(read_lock()).items():
        path = ROOT / f
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(f)
            if path.exists() and unhashed(path.read_text()):
                problems.append(f"{f} has requirements without a --hash: {', '.join(unhashed(path.read_text()))}")
        else:
            path.write_text(text)
    if stale:
        problems.append(f"out of date with requirements.lock: {', '.join(stale)}; run: python scripts/lock.py")
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
