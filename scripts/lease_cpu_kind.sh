#!/usr/bin/env bash
# The service against its peer on another CPU kind: the CPU of a leased machine that has no package registry
# (the GPU machine's host, see ../shared/ENVIRONMENT.md), restricted to two of its cores like the lab's machines.
#
#   scripts/lease_cpu_kind.sh pack              # here: the serving wheels the machine lacks -> build/cpu-kind/wheels
#   scripts/lease_cpu_kind.sh measure [cores]   # there: install, export, then on cores (default: two physical cores):
#                                               #   `servelab bench peer` fastapi vs litserve, JPEG, c=1 and 8, and
#                                               #   served ÷ in-process at batch 1 and 8 (notebook 01's hop)
#                                               # QUICK=1: a smoke run (numbers are not results); NO_INSTALL=1: here
#                                               # -> $OUT/cpu-kind-<cores>.tar.gz (records, reports, lscpu)
#
# Every process of a measurement inherits the affinity (`taskset`), and the engines size their thread pools by
# it (servelab.fingerprint.usable_cores), so both servers see two cores as they would on a 2-core machine. The
# engine is ONNX Runtime's CPU build, which that machine has; only the Python-side serving stack travels.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
WHEELS=$ROOT/build/cpu-kind/wheels   # git-ignored; carried to the machine
ROOTS="fastapi starlette uvicorn httptools python-multipart open_clip_torch litserve"
say() { echo "lease_cpu_kind: $*" >&2; }

pack() {  # the GPU reference's packer knows that machine (its platforms, what it has installed)
    rm -rf "$WHEELS" && mkdir -p "$WHEELS"
    bash "$ROOT/scripts/gpu_reference.sh" lease-closure "$WHEELS" $ROOTS > "$WHEELS/PINS"
    say "$(ls "$WHEELS"/*.whl | wc -l) wheels, $(du -sh "$WHEELS" | cut -f1)"
}

measure() {
    local cores=${1:-auto} site=/tmp/cpu-kind-site tag
    if [ "$cores" = auto ]; then  # two logical CPUs on two different physical cores, never two threads of one
        cores=$(lscpu -p=CPU,CORE | grep -v '^#' | sort -t, -k2,2n -u | head -2 | cut -d, -f1 | paste -sd,)
    fi
    tag=cpu-kind-$(echo "$cores" | tr ',-' '_to')
    mkdir -p "$site"
    [ -n "${NO_INSTALL:-}" ] || "${PYTHON:-python3}" -m pip install -q --no-index --no-deps --no-compile --target "$site" "$WHEELS"/*.whl
    export PYTHONPATH=$site:$ROOT SERVELAB_RESULTS=/tmp/cpu-kind-results PYTHONUNBUFFERED=1
    local py=${PYTHON:-python3}
    local sl=("$py" -m servelab.cli) run=$SERVELAB_RESULTS
    mkdir -p "$run"
    { lscpu; echo; "$py" -c "import onnxruntime, numpy; print('onnxruntime', onnxruntime.__version__, 'numpy', numpy.__version__)"; } \
        > "$run/$tag-machine.txt" 2>&1
    "${sl[@]}" export 2>&1 | tail -3
    taskset -c "$cores" "${sl[@]}" bench peer --servers fastapi,litserve --concurrencies 1,8 --payload jpeg \
        --run-id "$tag-peer" ${QUICK:+--quick} 2>&1 | tail -25 || say "peer ended early"
    taskset -c "$cores" "$py" - "$tag-hop" <<'EOF' || say "hop ended early"
import os
import sys

from servelab.bench.cli import _finish, _new_run
from servelab.bench.experiments import ab
from servelab.bench.load import LoadOpts
from servelab.bench.servers import served

run = _new_run(sys.argv[1], "hop")
recs = []
with served("fastapi", engine="onnx", payload="tensor", log_path=run.dir / "fastapi.log") as service, \
        served("in-process", engine="onnx") as local:
    for b in (1, 8):  # as notebook 01: the two sides' windows alternate
        recs += ab(run, "01-hop", service, local, label_a="service", label_b="in-process", batch_a=b, batch_b=b,
                   opts=LoadOpts.smoke() if os.environ.get("QUICK") else LoadOpts())
_finish(run, recs)
EOF
    if [ -n "${OUT:-}" ]; then
        tar -C "$run" -czf "$OUT/$tag.tar.gz" .
        say "results in \$OUT/$tag.tar.gz"
    fi
}

case "${1:-}" in
    pack) pack ;;
    measure) measure "${2:-}" ;;
    *) sed -n '2,12p' "$0" >&2; exit 2 ;;
esac
