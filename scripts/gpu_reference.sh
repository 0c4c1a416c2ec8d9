#!/usr/bin/env bash
# The GPU reference run, in two halves: the first here (a machine with a package registry), the second on the
# GPU machine (none there), so its short lease is spent measuring, not installing.
#
#   scripts/gpu_reference.sh gather     # here: every wheel the GPU machine lacks -> build/gpu-wheels/part-NN/
#   scripts/gpu_reference.sh rehearse   # here: reassemble, verify and install the parts into a Python 3.12 venv
#   scripts/gpu_reference.sh install    # there: reassemble, verify, install (no index), check CUDA really runs
#   scripts/gpu_reference.sh measure    # there: `pytest -m gpu`, the gpu lab profile -> reference/<gpu>/
#
# The GPU machine (see ../shared/ENVIRONMENT.md) has Python 3.12, torch 2.11 (CUDA 13), torchvision, numpy 2,
# pandas, matplotlib, pillow, onnx, the CPU onnxruntime, pytest, httpx, grpcio, typer, tqdm, jinja2, timm;
# everything else of the GPU lab set comes from here as wheels, pinned by requirements-gpu.txt. Each call to
# that machine carries at most 64 MiB, so the wheels travel in parts of at most PART_MIB (a wheel larger than
# that, onnxruntime-gpu's 255 MB, in numbered chunks); a warm machine keeps the parts earlier calls brought.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${GPU_WHEELS:-$ROOT/build/gpu-wheels}   # git-ignored
PART_MIB=${PART_MIB:-56}
PY_VERSION=3.12
# nvidia-pytriton 0.7.0 is built for glibc 2.35 only: the GPU machine needs glibc >= 2.35 (Ubuntu 22.04 or later)
PLATFORMS=(--platform manylinux_2_35_x86_64 --platform manylinux_2_34_x86_64 --platform manylinux_2_31_x86_64
           --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64
           --platform linux_x86_64)
# Installed on the GPU machine already (with what they need): never shipped, never replaced.
DEVICE_HAS="torch torchvision numpy pandas matplotlib pillow onnx onnxruntime pytest prometheus-client httpx grpcio
typer tqdm jinja2 timm opencv-python-headless"

say() { echo "gpu_reference: $*" >&2; }

# The pinned names==versions to ship: the lock's closure of the GPU lab set, less what the machine has.
wanted() {
    (cd "$ROOT" && DEVICE_HAS="$DEVICE_HAS" python3 - <<'EOF'
import os, sys
sys.path.insert(0, "scripts")
from lock import closure, read_lock  # the lock's own reader: one source of versions

packages = read_lock()
# the machine's own packages stay; their dependencies are shipped too (a newer build there may not bring the
# same ones), and pip on the machine installs only those it lacks
has = {n for n in os.environ["DEVICE_HAS"].split() if n in packages}
ship = closure(packages, ["servelab[lab-gpu]"]) - has - {"onnxruntime"}  # the GPU set brings onnxruntime-gpu
for name in sorted(ship):
    print(f"{packages[name]['name']}=={packages[name]['version']}")
EOF
    )
}

gather() {
    rm -rf "$OUT" && mkdir -p "$OUT/all"
    mapfile -t pins < <(wanted)
    say "downloading ${#pins[@]} wheels for Python $PY_VERSION, manylinux x86_64 into $OUT/all"
    python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version "$PY_VERSION" \
        "${PLATFORMS[@]}" -d "$OUT/all" "${pins[@]}"
    (cd "$OUT/all" && sha256sum -- *.whl > ../MANIFEST)
    pack
    say "$(ls "$OUT/all" | wc -l) wheels, $(du -sh "$OUT/all" | cut -f1); $(ls -d "$OUT"/part-* | wc -l) parts of at most ${PART_MIB} MiB"
}

# Spread the wheels over part-NN folders of at most PART_MIB each; a larger wheel goes in chunks.
pack() {
    rm -rf "$OUT"/part-* "$OUT/chunks" && mkdir -p "$OUT/chunks"
    local limit=$((PART_MIB * 1024 * 1024)) part=1 used=0 f size
    for f in "$OUT"/all/*.whl; do
        if [ "$(stat -c %s "$f")" -gt "$limit" ]; then
            split -b "$limit" -d -a 3 "$f" "$OUT/chunks/$(basename "$f").chunk-"
        fi
    done
    for f in $(ls -S "$OUT"/all/*.whl "$OUT"/chunks/* 2>/dev/null); do
        size=$(stat -c %s "$f")
        [ "$size" -gt "$limit" ] && continue  # shipped as chunks
        if [ $((used + size)) -gt "$limit" ]; then part=$((part + 1)); used=0; fi
        mkdir -p "$OUT/part-$(printf %02d $part)"
        ln "$f" "$OUT/part-$(printf %02d $part)/" 2>/dev/null || cp "$f" "$OUT/part-$(printf %02d $part)/"
        used=$((used + size))
    done
    for d in "$OUT"/part-*; do cp "$OUT/MANIFEST" "$d/"; done
    rm -rf "$OUT/chunks"
}

# Rebuild build/gpu-wheels/all from whatever parts are present, and check every wheel against the manifest.
assemble() {
    local manifest
    manifest=$(ls "$OUT"/part-*/MANIFEST 2>/dev/null | head -1)
    [ -n "$manifest" ] || { say "no parts in $OUT (carry build/gpu-wheels/part-NN over first)"; exit 1; }
    mkdir -p "$OUT/all"
    cp "$OUT"/part-*/*.whl "$OUT/all/" 2>/dev/null || true
    local chunked
    for chunked in $(ls "$OUT"/part-*/*.chunk-* 2>/dev/null | sed 's/\.chunk-[0-9]*$//' | xargs -r -n1 basename | sort -u); do
        # chunk-000, chunk-001 …: in order of their names, whichever part brought each
        for f in "$OUT"/part-*/"$chunked".chunk-*; do echo "$(basename "$f") $f"; done | sort | cut -d' ' -f2 |
            xargs cat > "$OUT/all/$chunked"
    done
    (cd "$OUT/all" && sha256sum --quiet -c "$manifest") || {
        say "wheels missing or damaged (a part not carried yet?): see the lines above"; exit 1; }
    say "$(wc -l < "$manifest") wheels verified in $OUT/all"
}

# servelab's own requirements for the GPU lab (pyproject's lab-gpu, extras expanded), less SKIP_ROOTS, less the
# `numpy<2` of the triton extra (nvidia-pytriton's own pin; numpy 2 stays on the machine, pytriton goes --no-deps)
roots() {
    (cd "$ROOT" && SKIP_ROOTS="${SKIP_ROOTS:-}" "${PYTHON:-python3}" - <<'EOF'
import os, re, tomllib
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
skip = set(os.environ["SKIP_ROOTS"].split()) | {"numpy", "nvidia-pytriton"}
def expand(extra, seen):
    for req in project["optional-dependencies"][extra]:
        m = re.match(r"servelab\[([^\]]+)\]", req)
        for e in (m.group(1).split(",") if m else []):
            if e.strip() not in seen:
                seen.add(e.strip())
                yield from expand(e.strip(), seen)
        if not m:
            yield req
try:  # nvidia-pytriton went in without its dependencies: they join the roots, numpy excepted
    from importlib.metadata import requires
    pytriton = [r for r in requires("nvidia-pytriton") or [] if "extra ==" not in r]
except Exception:
    pytriton = []
for req in list(project["dependencies"]) + list(expand("lab-gpu", set())) + pytriton:
    if re.split(r"[\[<>=!~; ]", req, maxsplit=1)[0].lower().replace("_", "-") not in skip:
        print(req)
EOF
    )
}

install() {
    local py=${PYTHON:-python3}
    assemble
    # onnxruntime and onnxruntime-gpu ship the same module: the CPU build goes before the GPU one comes
    "$py" -m pip uninstall -y -q onnxruntime 2>/dev/null || true
    "$py" -m pip install -q --no-index --no-deps "$OUT"/all/nvidia_pytriton-*.whl
    # what the machine has and satisfies a requirement stays; the rest comes from the shipped wheels only
    "$py" -m pip install -q --no-index --find-links "$OUT/all" -r <(roots)
    "$py" -m pip install -q --no-index --no-deps --no-build-isolation -e "$ROOT"
    "$py" -m ipykernel install --sys-prefix --name servelab --display-name "servelab (.venv)" >/dev/null
    "$py" - <<'EOF'
from servelab.model.providers import provider_check, torch_cuda_check
for name, check in (("onnxruntime cuda", provider_check("cuda")), ("torch cuda", torch_cuda_check())):
    print(f"{name}: {'runs' if check.usable else 'cannot run: ' + check.reason}")
EOF
}

gpu_slug() {
    nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | tr '[:upper:]' '[:lower:]' | tr -cs 'a-z0-9' '-' |
        sed 's/-*$//'
}

measure() {
    local py=${PYTHON:-python3} slug run_id dest
    slug=$(gpu_slug)
    run_id="gpu-reference-$(date -u +%Y%m%d-%H%M%S)"
    dest="$ROOT/reference/$slug"
    mkdir -p "$dest"
    "$py" - <<'EOF' || { say "CUDA does not run here: nothing measured"; exit 1; }
from servelab.model.providers import provider_check
check = provider_check("cuda")
raise SystemExit(0 if check.usable else f"onnxruntime cannot run CUDA: {check.reason}")
EOF
    (cd "$ROOT" && "$py" -m pytest -m gpu -rs -q tests/gpu) > "$dest/gpu-tests.txt" 2>&1 || say "gpu tests failed: $dest/gpu-tests.txt"
    (cd "$ROOT" && timeout "${MEASURE_S:-480}" "$py" -c "from servelab.cli import main; main()" lab run --device cuda \
        --profile gpu --run-id "$run_id" --no-progress-bar) || say "the lab run ended early (see $ROOT/results/$run_id/report.md)"
    local run="$ROOT/results/$run_id"
    for item in report.md run.json environment.json headlines.json tables plots; do
        if [ -e "$run/$item" ]; then cp -r "$run/$item" "$dest/"; fi
    done
    say "reference written to $dest ($(du -sh "$dest" | cut -f1))"
}

# Here: everything of the GPU machine's half that needs no GPU, in a Python 3.12 virtual environment.
rehearse() {
    local py312="" venv="$ROOT/build/gpu-rehearsal" c
    for c in ${PYTHON312:-} $(ls "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12*/bin/python3.12 2>/dev/null) python3.12; do
        if "$c" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null; then py312=$c; break; fi
    done
    [ -n "$py312" ] || { say "no Python 3.12 here to rehearse with (set PYTHON312)"; exit 1; }
    rm -rf "$OUT/all" "$venv"
    "$py312" -m venv "$venv"
    # the machine's own packages that the lab imports without CUDA (torch and friends are not rehearsed here)
    # stand-ins for the machine's own packages, from this registry; CUDA torch cannot be, so the roots that need
    # torch are left to the machine (open_clip_torch's wheel is still installed, without its dependencies)
    "$venv/bin/pip" install -q "numpy>=2" pillow pyyaml typer tqdm httpx jinja2 prometheus-client grpcio pandas \
        matplotlib onnx pytest setuptools
    SKIP_ROOTS="torch torchvision open-clip-torch" PYTHON="$venv/bin/python" install
    "$venv/bin/pip" install -q --no-index --no-deps "$OUT"/all/open_clip_torch-*.whl
    "$venv/bin/python" - <<'EOF'
import importlib
for module in ("fastapi", "uvicorn", "multipart", "tritonclient.http", "tritonclient.grpc", "pytriton",
               "onnxruntime", "papermill", "ipykernel", "jupytext", "servelab.service.app", "servelab.triton.server"):
    importlib.import_module(module)
import onnxruntime
assert "CUDAExecutionProvider" in onnxruntime.get_available_providers(), "onnxruntime-gpu not the one installed"
print("imports ok; onnxruntime", onnxruntime.__version__, onnxruntime.get_available_providers())
EOF
    "$venv/bin/python" - <<'EOF'
from pathlib import Path
import subprocess
import pytriton
binary = Path(pytriton.__file__).parent / "tritonserver" / "bin" / "tritonserver"
done = subprocess.run([str(binary), "--help"], capture_output=True, text=True)
print("bundled tritonserver starts:", done.returncode == 0 or "Usage" in done.stdout + done.stderr)
EOF
}

case "${1:-}" in
    gather) gather ;;
    pack) pack ;;
    rehearse) rehearse ;;
    install) install ;;
    measure) measure ;;
    wanted) wanted ;;
    roots) roots ;;
    *) sed -n '2,9p' "$0" >&2; exit 2 ;;
esac
