#!/usr/bin/env bash
# The GPU reference run, in two halves: the first here (a machine with a package registry), the second on the
# GPU machine (none there), so its short lease is spent measuring, not installing.
#
#   The reference run in two calls of under ten minutes each (`servelab bench gpu-reference`'s stages):
#   scripts/gpu_reference.sh lease-pack                  # here: build/gpu-lease/call-1, call-2: <= 64 MiB with the tree
#   bash scripts/gpu_reference.sh lease-call 1 [s]       # there, carrying call-1: the service, py-spy, the nvJPEG ceiling
#   bash scripts/gpu_reference.sh lease-call 2 [s]       # there, carrying call-2: Triton, the gpu lab profile
#   scripts/gpu_reference.sh lease-rehearse              # here: both calls' install and checks, in a Python 3.12 venv
#   scripts/gpu_reference.sh lease-pack-parts            # here: the older five parts, onnxruntime-gpu included
#   scripts/gpu_reference.sh lease-install <folder>      # there: install what one call's folder completes
#   scripts/gpu_reference.sh lease-stage <stage> [s]     # there: one stage -> $OUT/gpu-reference.tar.gz
#   scripts/gpu_reference.sh lease-env                   # there: the exports the stages run with
#   scripts/gpu_reference.sh lease-closure <folder> <root …> # here: those roots' wheels for that machine (other packers)
#
#   The whole GPU lab set (the gpu profile through the notebooks; ~440 MB, 8 calls):
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
RESULTS_OUT=${OUT:-}                        # the device tool's folder for what comes back (set there)
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

# A Python 3.12 to rehearse the GPU machine's side with (its python3): $PYTHON312, a pyenv one, or python3.12.
python312() {
    local c
    for c in ${PYTHON312:-} $(ls "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12*/bin/python3.12 2>/dev/null) python3.12; do
        if "$c" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null; then echo "$c"; return 0; fi
    done
    return 1
}

# Here: everything of the GPU machine's half that needs no GPU, in a Python 3.12 virtual environment.
rehearse() {
    local py312 venv="$ROOT/build/gpu-rehearsal"
    py312=$(python312) || { say "no Python 3.12 here to rehearse with (set PYTHON312)"; exit 1; }
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

# --- The reference run within one short lease (`servelab bench gpu-reference`): only what it needs travels ----
# The roots of what the stages need: the engine, the service, the Triton client and server, and the records.
# What they require in turn comes too (scripts/lease_closure.py), pinned, less what the machine has.
REFERENCE_SET="fastapi starlette uvicorn httptools python-multipart tenacity open_clip_torch tritonclient
python-rapidjson geventhttpclient jsonschema nvidia-ml-py nvidia-pytriton onnxruntime-gpu"
# The GPU machine's own packages (its image, as the device notes list them, 2026-11): never shipped
DEVICE_PACKAGES="absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs build certifi
charset-normalizer click cloudpickle colorama contourpy cycler filelock flatbuffers fonttools frozenlist fsspec grpcio h11
hf-xet httpcore httpx huggingface-hub idna imageio iniconfig jinja2 joblib kiwisolver markdown markdown-it-py markupsafe
matplotlib mdurl ml-dtypes mpmath msgpack multidict networkx numpy nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc
nvidia-cuda-runtime nvidia-cudnn-cu13 nvidia-cufft nvidia-cufile nvidia-curand nvidia-cusolver nvidia-cusparse
nvidia-cusparselt-cu13 nvidia-nccl-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx onnx packaging pandas pillow
pip pluggy prometheus-client propcache protobuf psutil pygments pyparsing pytest python-dateutil pyyaml regex requests
rich safetensors scipy setuptools shellingham six sympy tabulate timm torch torchvision tqdm triton typer
typing-extensions urllib3 uvloop wheel wrapt yarl zipp"
LEASE=${GPU_LEASE_DIR:-$ROOT/build/gpu-lease}   # git-ignored; carry build/gpu-lease/part-N, one per call
LEASE_MIB=${LEASE_MIB:-60}                      # each call carries 64 MiB with the working tree (about 2.5)
T=${GPU_LEASE_TMP:-/tmp}                        # there: where the parts, the wheels' site, the stub and results go

# Here: the wheels for the roots given and all they require, pinned by requirements-gpu.txt, less what the GPU
# machine has, downloaded into a folder; prints the pins (scripts/lease_closure.py does the walking)
lease_closure() {
    local wheels=${1:?folder for the wheels} && shift
    (cd "$ROOT" && ROOTS="$*" DEVICE_PACKAGES="$DEVICE_PACKAGES" WHEELS="$wheels" PLATFORM_ARGS="${PLATFORMS[*]}" \
        python3 scripts/lease_closure.py)
}

# Here: the reference set as wheels, onnxruntime-gpu re-packed as tar.xz (255 -> 193 MiB: one call fewer), all
# of it spread over part-1 … part-N of at most LEASE_MIB each, with a manifest in every part (five calls; the
# two-call pack below leaves onnxruntime-gpu out).
lease_pack_parts() {
    local cache="$LEASE/cache"
    if [ ! -s "$cache/ort-gpu.tar.xz" ]; then  # downloads and the xz take minutes: kept for the next pack
        rm -rf "$cache" && mkdir -p "$cache/wheels"
        lease_closure "$cache/wheels" $REFERENCE_SET > "$cache/PINS"
        # numpy 1 for the python-backend stub's environment (the bundled backend answers empty tensors under numpy 2)
        python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version "$PY_VERSION" \
            "${PLATFORMS[@]}" -d "$cache/wheels" "$(grep -oE '^numpy==1[^ \\]*' "$ROOT/requirements-gpu.txt")"
        say "$(wc -l < "$cache/PINS") wheels and numpy 1 for the stub: $(tr '\n' ' ' < "$cache/PINS")"
        local ort
        ort=$(ls "$cache"/wheels/onnxruntime_gpu-*.whl)
        mkdir -p "$cache/ort" && (cd "$cache/ort" && unzip -q "$ort")
        tar -C "$cache/ort" -cf - . | xz -9 -T0 > "$cache/ort-gpu.tar.xz.tmp" && mv "$cache/ort-gpu.tar.xz.tmp" "$cache/ort-gpu.tar.xz"
        rm -rf "$cache/ort" "$ort"
    fi
    rm -rf "$LEASE"/part-* "$LEASE/chunks" && mkdir -p "$LEASE/chunks"
    # chunks of a fifth of a part fill the room the wheels leave
    split -b "$((LEASE_MIB * 1024 * 1024 / 5))" -d -a 3 "$cache/ort-gpu.tar.xz" "$LEASE/chunks/ort-gpu.tar.xz.chunk-"
    { (cd "$cache" && sha256sum ort-gpu.tar.xz); echo "chunks $(ls "$LEASE"/chunks | wc -l)"; } > "$LEASE/MANIFEST"
    # first fit, smallest wheels first: part-1 brings everything the engine and the service need
    local limit=$((LEASE_MIB * 1024 * 1024)) f size n placed
    local -a used=()
    for f in $(ls -Sr "$cache"/wheels/*.whl) $(ls "$LEASE"/chunks/*); do
        size=$(stat -c %s "$f") placed=""
        for ((n = 0; ; n++)); do
            if [ $((${used[$n]:-0} + size)) -le "$limit" ]; then
                mkdir -p "$LEASE/part-$((n + 1))" && cp -l "$f" "$LEASE/part-$((n + 1))/" 2>/dev/null ||
                    cp "$f" "$LEASE/part-$((n + 1))/"
                used[$n]=$((${used[$n]:-0} + size)) placed=1
                break
            fi
        done
    done
    rm -rf "$LEASE/chunks"
    for d in "$LEASE"/part-*; do cp "$LEASE/MANIFEST" "$d/"; say "$(basename "$d"): $(du -sm "$d" | cut -f1) MiB, $(ls "$d" | wc -l) files"; done
}

# There, once per call: the part this call carried joins what earlier calls left in /tmp/gpu-lease. Its wheels
# go into /tmp/gpu-site (no index, no dependencies: the set is pinned and complete), on PYTHONPATH ahead of the
# machine's own packages (`lease_env`). Triton's python-backend stub ignores PYTHONPATH and needs numpy 1, so it
# gets an environment of its own, /tmp/gpu-stub: a venv with numpy 1 and, once every
# chunk has come and matched the manifest, onnxruntime-gpu, ahead of the machine's packages (a .pth file names
# them). This process's onnxruntime-gpu is /tmp/gpu-ort.
lease_install() {
    local part=${1:?which part (build/gpu-lease/part-N)} have="$T/gpu-lease" stub="$T/gpu-stub"
    mkdir -p "$have" "$T/gpu-site"
    local stub_site
    if [ ! -x "$stub/bin/python" ]; then  # its own site-packages first, then the machine's (a .pth file)
        python3 -m venv --without-pip "$stub"
        stub_site=$("$stub/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
        python3 -c "import sysconfig; p = sysconfig.get_paths(); print('\n'.join(dict.fromkeys([p['purelib'], p['platlib']])))" \
            > "$stub_site/machine.pth"
        echo "$T/gpu-site" >> "$stub_site/machine.pth"  # after the machine's: open_clip for the torch encoder
    fi
    stub_site=$("$stub/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
    cp -r "$ROOT/$part"/. "$have/"
    if [ -f "$have/SHA256SUMS" ]; then  # a call's folder: its wheels, checked before anything is installed
        (cd "$have" && sha256sum --quiet -c SHA256SUMS) || { say "wheels damaged in transit: see the lines above"; exit 1; }
        rm "$have/SHA256SUMS"
    fi
    local pip=(python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade)
    if ls "$have"/numpy-*.whl >/dev/null 2>&1; then
        "${pip[@]}" --target "$stub_site" "$have"/numpy-*.whl && rm -f "$have"/numpy-*.whl
    fi
    if ls "$have"/perf_analyzer-*.whl >/dev/null 2>&1; then  # its own wheel needs glibc 2.38: a rehearsal may lack it
        "${pip[@]}" --target "$T/gpu-site" "$have"/perf_analyzer-*.whl ||
            say "perf_analyzer not installable here (its wheel needs glibc 2.38; this machine has $(ldd --version | head -1 | grep -oE '[0-9.]+$'))"
        rm -f "$have"/perf_analyzer-*.whl
    fi
    if ls "$have"/*.whl >/dev/null 2>&1; then
        "${pip[@]}" --target "$T/gpu-site" "$have"/*.whl && rm -f "$have"/*.whl
    fi
    local want
    want=$(awk '/^chunks/ {print $2}' "$have/MANIFEST" 2>/dev/null || true)
    want=${want:-0}
    if [ "$want" -gt 0 ] && [ ! -d "$T/gpu-ort" ] && [ "$(ls "$have"/ort-gpu.tar.xz.chunk-* 2>/dev/null | wc -l)" = "$want" ]; then
        cat "$have"/ort-gpu.tar.xz.chunk-* > "$have/ort-gpu.tar.xz"
        (cd "$have" && sha256sum --quiet -c <(head -1 MANIFEST)) || { say "onnxruntime-gpu damaged in transit"; exit 1; }
        mkdir -p "$T/gpu-ort" && xz -dc -T0 "$have/ort-gpu.tar.xz" | tar -C "$T/gpu-ort" -xf - && rm "$have"/ort-gpu.tar.xz*
        cp -r "$T/gpu-ort/." "$stub_site/"
    fi
    say "installed: $(ls "$T/gpu-site" | grep -c dist-info) packages; the stub's numpy $("$stub/bin/python" -c 'import numpy; print(numpy.__version__)' 2>&1 | tail -1); onnxruntime-gpu $(if [ -d "$T/gpu-ort" ]; then echo ready; elif [ "$want" -gt 0 ]; then echo "$(ls "$have"/ort-gpu.tar.xz.chunk-* 2>/dev/null | wc -l)/$want chunks"; else echo "not carried"; fi)"
}

lease_env() {
    echo "export PYTHONPATH=$T/gpu-ort:$T/gpu-site:$ROOT SERVELAB_RESULTS=$T/gpu-results PYTHONUNBUFFERED=1" \
        "SERVELAB_TRITON_PYTHON=$T/gpu-stub/bin/python PATH=$T/gpu-site/bin:\$PATH"  # py-spy, perf_analyzer
}

# There: one stage of `servelab bench gpu-reference` into the run gpu-reference, then the run as one archive in
# $OUT (what comes back from that machine), whether the stage finished or not.
lease_stage() {
    local stage=${1:?raw | service | triton} budget=${2:-200}
    eval "$(lease_env)"
    timeout "$((budget + 60))" python3 -m servelab.cli bench gpu-reference --stage "$stage" --run-id gpu-reference \
        --budget-s "$budget" || say "stage $stage ended early (exit $?)"
    if [ -n "$RESULTS_OUT" ] && [ -d "$T/gpu-results"/gpu-reference ]; then
        tar -C "$T/gpu-results" -czf "$RESULTS_OUT/gpu-reference.tar.gz" gpu-reference
    fi
}

# --- Two calls of under ten minutes, at most 64 MiB each with the working tree --------------------------------
# Call 1 carries everything but nvidia-pytriton (the service, py-spy, perf_analyzer, numpy 1 for Triton's stub,
# the notebook runner); call 2 carries nvidia-pytriton, a warm machine keeping what call 1 brought. onnxruntime-gpu
# (193 MiB even as xz) travels in neither: ONNX Runtime's CUDA rows and Triton's ONNX encoder on KIND_GPU wait for a
# lease that can carry it (`lease-pack-parts`), and say so in their records.
CALL_MIB=${CALL_MIB:-64}
CALL_EXTRA="py-spy==0.4.3 perf-analyzer==2.60.0"  # perf_analyzer's own wheel needs glibc 2.38 (Ubuntu 24.04 has 2.39)
CALL_SET="fastapi starlette uvicorn httptools python-multipart tenacity open_clip_torch tritonclient python-rapidjson
geventhttpclient jsonschema nvidia-ml-py nvidia-pytriton papermill ipykernel jupytext"

tree_bytes() { (cd "$ROOT" && git ls-files -z 2>/dev/null | du -b --files0-from=- -c | tail -1 | cut -f1); }

lease_pack() {
    local cache="$LEASE/cache-calls"
    if [ ! -s "$cache/PINS" ]; then
        rm -rf "$cache" && mkdir -p "$cache/wheels"
        lease_closure "$cache/wheels" $CALL_SET > "$cache/PINS.tmp"
        python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version "$PY_VERSION" \
            --platform manylinux_2_38_x86_64 "${PLATFORMS[@]}" -d "$cache/wheels" \
            "$(grep -oE '^numpy==1[^ \\]*' "$ROOT/requirements-gpu.txt")" $CALL_EXTRA
        mv "$cache/PINS.tmp" "$cache/PINS"
    fi
    local room=$((CALL_MIB * 1024 * 1024 - $(tree_bytes) - 1024 * 1024)) n f used
    rm -rf "$LEASE"/call-* && mkdir -p "$LEASE/call-1" "$LEASE/call-2"
    for f in "$cache"/wheels/*.whl; do
        case "$(basename "$f")" in nvidia_pytriton-*) n=2 ;; *) n=1 ;; esac
        cp -l "$f" "$LEASE/call-$n/" 2>/dev/null || cp "$f" "$LEASE/call-$n/"
    done
    for n in 1 2; do
        (cd "$LEASE/call-$n" && sha256sum -- *.whl > SHA256SUMS)
        used=$(du -bc "$LEASE/call-$n"/* | tail -1 | cut -f1)
        say "call-$n: $((used / 1024 / 1024)) MiB in $(ls "$LEASE/call-$n" | wc -l) files; room $((room / 1024 / 1024)) MiB beside the tree"
        [ "$used" -le "$room" ] || { say "call-$n is over ${CALL_MIB} MiB with the working tree: it would not travel"; exit 1; }
    done
}

# There: one call, within about `budget` seconds (the call itself may take ten minutes). The stages' records go to
# one run, archived into $OUT after each stage, whatever happens to the next.
lease_call() {
    local n=${1:?1 or 2} budget=${2:-540} t0=$SECONDS
    lease_install "build/gpu-lease/call-$n"
    if [ -n "${LEASE_REHEARSE:-}" ]; then lease_check "$n"; return; fi
    left() { echo $((budget - (SECONDS - t0))); }
    case "$n" in
        1)  lease_stage service "$(( $(left) * 55 / 100 ))"   # decode device|cpu × 1|4 processes; 1..128 clients
            lease_stage profile 45                             # py-spy on the loaded service
            lease_stage ceiling 60                             # nvJPEG into a CUDA graph at 64 / 128 / 256
            (cd "$ROOT" && eval "$(lease_env)" && timeout "$(( $(left) > 30 ? $(left) : 30 ))" \
                python3 -m pytest -m gpu -q -rs tests/gpu) > "$T/gpu-results/gpu-tests.txt" 2>&1 || true ;;
        2)  lease_stage triton "$(( $(left) / 3 ))"            # the bundled tritonserver, its stub on numpy 1
            lease_lab "$(( $(left) - 30 ))" ;;                 # the gpu lab profile through the notebooks
        *)  say "a call is 1 or 2, not $n"; exit 2 ;;
    esac
    lease_archive
}

lease_archive() {
    if [ -n "$RESULTS_OUT" ] && [ -d "$T/gpu-results" ]; then
        tar -C "$T/gpu-results" -czf "$RESULTS_OUT/gpu-reference.tar.gz" .
    fi
}

# There: the `gpu` lab profile through the notebooks, for as long as the call allows.
lease_lab() {
    local budget=${1:-300}
    eval "$(lease_env)"
    (cd "$ROOT" && timeout "$budget" python3 -m servelab.cli lab run --device cuda --profile gpu \
        --run-id gpu-lab --no-progress-bar) || say "the lab run ended early (see $T/gpu-results/gpu-lab/report.md)"
}

# A rehearsal's check in place of the measurements: what each call's stages import and run is there.
lease_check() {
    eval "$(lease_env)"
    python3 - "$1" <<'CHECK'
import importlib, shutil, subprocess, sys
call = sys.argv[1]
modules = {"1": ["fastapi", "uvicorn", "multipart", "httptools", "tenacity", "pynvml", "papermill", "jupytext",
                 "ipykernel", "tritonclient.http", "tritonclient.grpc", "servelab.service.app",
                 "servelab.bench.experiments.gpu_reference"],
           "2": ["pytriton", "servelab.triton.server"]}[call]
for m in modules:
    importlib.import_module(m)
for tool in {"1": ["py-spy", "perf_analyzer"], "2": []}[call]:
    path = shutil.which(tool)
    if not path:
        print(f"{tool}: not installed here (see the install's line above)")
        continue
    done = subprocess.run([path, "--help"], capture_output=True, text=True)
    said = (done.stdout + done.stderr).strip()
    print(f"{tool}: {path}: " + ("starts" if done.returncode == 0 or "sage" in said else "does not start: " + said[:300]))
if call == "2":
    from pathlib import Path
    import pytriton
    binary = Path(pytriton.__file__).parent / "tritonserver" / "bin" / "tritonserver"
    started = binary.exists() and subprocess.run([str(binary), "--help"], capture_output=True, text=True)
    print("bundled tritonserver:", binary, "starts" if started and "Usage" in started.stdout + started.stderr
          else "MISSING or does not start")
print(f"call {call}: {len(modules)} modules import")
CHECK
    "$T/gpu-stub/bin/python" -c 'import numpy; assert numpy.__version__.startswith("1."), numpy.__version__; print("the stub sees numpy", numpy.__version__)'
}

# Here: both calls as the GPU machine would take them, in a Python 3.12 venv holding stand-ins for the machine's
# own packages (from this machine's registry; CUDA torch cannot be one, so nothing that needs torch is run).
lease_rehearse() {
    local py312 venv="$ROOT/build/gpu-lease-rehearsal"
    py312=$(python312) || { say "no Python 3.12 here to rehearse with (set PYTHON312)"; exit 1; }
    rm -rf "$venv" && "$py312" -m venv "$venv"
    local stand_ins=() p
    for p in $DEVICE_PACKAGES; do  # the machine's own packages, less what needs CUDA (torch and what requires it)
        case "$p" in nvidia-*|torch|torchvision|triton|timm|accelerate) ;; *) stand_ins+=("$p") ;; esac
    done
    "$venv/bin/pip" install -q "${stand_ins[@]}" onnxruntime
    local t0=$SECONDS
    PATH="$venv/bin:$PATH" T="$venv/there" LEASE_REHEARSE=1 lease_call 1
    say "call 1 rehearsed in $((SECONDS - t0)) s"
    t0=$SECONDS
    PATH="$venv/bin:$PATH" T="$venv/there" LEASE_REHEARSE=1 lease_call 2
    say "call 2 rehearsed in $((SECONDS - t0)) s"
}

case "${1:-}" in
    gather) gather ;;
    lease-pack) lease_pack ;;
    lease-pack-parts) lease_pack_parts ;;
    lease-call) lease_call "${2:-}" "${3:-}" ;;
    lease-rehearse) lease_rehearse ;;
    lease-closure) shift; lease_closure "$@" ;;
    lease-install) lease_install "${2:-}" ;;
    lease-env) lease_env ;;
    lease-stage) lease_stage "${2:-}" "${3:-}" ;;
    pack) pack ;;
    rehearse) rehearse ;;
    install) install ;;
    measure) measure ;;
    wanted) wanted ;;
    roots) roots ;;
    *) sed -n '2,19p' "$0" >&2; exit 2 ;;
esac
