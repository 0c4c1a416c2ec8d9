"""The wheels a GPU machine needs for `servelab bench gpu-reference`: the roots, and what they require on Linux
x86-64 CPython 3.12, pinned by requirements-gpu.txt, less the packages the machine already has. Missing wheels
are downloaded into WHEELS as they are found (their metadata names what they need in turn).

    ROOTS="fastapi …" DEVICE_PACKAGES="torch …" WHEELS=dir PLATFORM_ARGS="--platform …" python3 scripts/lease_closure.py
"""

import glob
import os
import re
import subprocess
import sys
import zipfile

from packaging.markers import default_environment
from packaging.requirements import Requirement


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requires(wheel: str, env: dict) -> list[str]:
    z = zipfile.ZipFile(wheel)
    meta = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    out = []
    for line in meta.splitlines():
        if line.startswith("Requires-Dist:"):
            req = Requirement(line.split(":", 1)[1])
            if req.marker is None or req.marker.evaluate(env):
                out.append(norm(req.name))
    return out


def main() -> None:
    # name==version of each pin (a pin line continues with ` \` and its --hash lines)
    pins = {norm(Requirement(line.split()[0]).name): line.split()[0] for line in open("requirements-gpu.txt")
            if "==" in line and not line.startswith("#")}
    env = {**default_environment(), "python_version": "3.12", "python_full_version": "3.12.3",
           "sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64",
           "implementation_name": "cpython", "platform_python_implementation": "CPython", "extra": ""}
    skip = {norm(n) for n in os.environ["DEVICE_PACKAGES"].split()} | {"onnxruntime"}  # the GPU build replaces it
    wheels_dir = os.environ["WHEELS"]
    want, done = [norm(n) for n in os.environ["ROOTS"].split()], set()
    while want:
        name = want.pop()
        if name in done or name in skip:
            continue
        if name not in pins:
            sys.exit(f"{name} is needed but not pinned in requirements-gpu.txt")
        found = [w for w in glob.glob(os.path.join(wheels_dir, "*.whl")) if norm(os.path.basename(w).split("-")[0]) == name]
        if not found:
            subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                            "--python-version", "3.12", *os.environ["PLATFORM_ARGS"].split(), "-d", wheels_dir,
                            pins[name]], check=True)
            found = [w for w in glob.glob(os.path.join(wheels_dir, "*.whl"))
                     if norm(os.path.basename(w).split("-")[0]) == name]
        done.add(name)
        want += requires(found[0], env)
    print("\n".join(sorted(pins[n] for n in done)))


if __name__ == "__main__":
    main()
