#!/usr/bin/env bash
# Stand-in base images, for a machine whose Docker engine cannot reach an image registry (Docker Hub, nvcr.io).
#
#   bash scripts/standin_images.sh            # as a user who can run docker; debootstrap needs root (or sudo)
#
# The images in docker/ start FROM three public tags. For each tag this script keeps an image the engine
# already has, else tries `docker pull`, and only when the pull fails builds a stand-in from Debian packages and
# tags it with the real name, in this engine only: nothing is pushed, and a machine that can pull gets the
# real images. Every stand-in says what it is: the label org.servelab.standin and the variable SERVELAB_STANDIN,
# which every image built on it inherits, so the service's /info, the lab's records and this script's output
# name the stand-in.
#
#   python:3.11.14-slim-bookworm                 Debian 12 + this machine's CPython 3.11 at /usr/local, where the
#                                                official image has it (Debian's own 3.11.2 is older than the
#                                                3.11.5 some locked packages require)
#   nvidia/cuda:13.0.2-cudnn-runtime-ubuntu24.04 Debian 12, no CUDA at all: the CPU rehearsal of the GPU image
#   nvcr.io/nvidia/tritonserver:25.10-py3        the tritonserver 2.51 bundled in the nvidia-pytriton wheel with
#                                                its python backend only (no onnxruntime backend: it serves the
#                                                CPU repository), on the python stand-in
#
# pip inside the stand-ins uses this machine's CA bundle and, as pip here does, its find-links folder (the CPU
# torch wheel), so a build that pins torch gets the CPU build instead of several GB of CUDA wheels.
# Knobs: STANDIN_MIRROR (Debian mirror; default: the one in this machine's apt sources), STANDIN_WORK (scratch
# folder, default build/standin), STANDIN_FORCE=1 (rebuild stand-ins even when the tags exist),
# STANDIN_PULL_TIMEOUT (seconds a pull may try, default 20).
set -euo pipefail
cd "$(dirname "$0")/.."

PY_TAG=python:3.11.14-slim-bookworm
CUDA_TAG=nvidia/cuda:13.0.2-cudnn-runtime-ubuntu24.04
TRITON_TAG=nvcr.io/nvidia/tritonserver:25.10-py3
ROOTFS_TAG=servelab-standin/debian:bookworm
# name==version only: each pin in the hashed requirements file continues with `\` and its --hash lines
PYTRITON_PIN=$(grep -oE '^nvidia-pytriton==[^ \\]+' requirements.txt | head -n1)
ORT_PIN=$(grep -oE '^onnxruntime==[^ \\]+' requirements.txt | head -n1)
NUMPY_PIN=$(grep -oE '^numpy==[^ \\]+' requirements.txt | head -n1)
PILLOW_PIN=$(grep -oiE '^pillow==[^ \\]+' requirements.txt | head -n1)
WORK=${STANDIN_WORK:-build/standin}
SUDO=$([ "$(id -u)" = 0 ] || echo sudo)
say() { printf '[standin] %s\n' "$*"; }

have() { docker image inspect "$1" >/dev/null 2>&1; }
is_standin() { [ -n "$(docker image inspect -f '{{index .Config.Labels "org.servelab.standin"}}' "$1" 2>/dev/null)" ]; }

# 0 = the real image is there (now), 1 = a stand-in is needed
want_real() {
  local tag=$1
  if have "$tag" && ! is_standin "$tag"; then say "$tag: the real image is here"; return 0; fi
  if have "$tag" && [ "${STANDIN_FORCE:-0}" != 1 ]; then say "$tag: stand-in already built"; return 0; fi
  if timeout "${STANDIN_PULL_TIMEOUT:-20}" docker pull -q "$tag" >/dev/null 2>&1; then
    say "$tag: pulled the real image"; return 0
  fi
  say "$tag: no registry answers; building a stand-in from Debian packages"
  return 1
}

mirror() {
  if [ -n "${STANDIN_MIRROR:-}" ]; then echo "$STANDIN_MIRROR"; return; fi
  local m
  m=$(grep -hoE '^(URIs:|deb) +(\[[^]]*\] +)?https?://[^ ]+' /etc/apt/sources.list /etc/apt/sources.list.d/* 2>/dev/null \
      | grep -v security | head -n1 | awk '{print $NF}')
  echo "${m:-http://deb.debian.org/debian}"
}

# The CPython 3.11 this machine runs (a source build such as pyenv's, not Debian's /usr), copied to /usr/local.
host_python() {
  local prefix
  prefix=$(python3.11 -c 'import sys; v = sys.version_info; print(sys.base_prefix if v >= (3, 11, 5) else "")' 2>/dev/null || true)
  case "$prefix" in ""|/usr) echo "";; *) echo "$prefix";; esac
}

# One Debian 12 root filesystem for all three: minbase plus what python's slim image has (passwd for useradd,
# ca-certificates, the libraries CPython links), and CPython 3.11 in /usr/local.
build_rootfs() {
  have "$ROOTFS_TAG" && [ "${STANDIN_FORCE:-0}" != 1 ] && return 0
  command -v debootstrap >/dev/null || {
    say "installing debootstrap (Debian package)"
    $SUDO apt-get install -y -qq debootstrap >/dev/null
  }
  local dir="$WORK/rootfs"
  $SUDO rm -rf "$dir"; mkdir -p "$WORK"
  say "debootstrap bookworm from $(mirror) (about a minute)"
  $SUDO debootstrap --variant=minbase --include=passwd,ca-certificates,netbase,tzdata,python3,python3-pip,python3-venv,libpython3.11,libstdc++6,libgomp1 \
    bookworm "$dir" "$(mirror)" >"$WORK/debootstrap.log" 2>&1 || { say "debootstrap failed: see $WORK/debootstrap.log"; exit 1; }
  local py; py=$(host_python)
  if [ -n "$py" ]; then
    say "CPython $(python3.11 -c 'import platform; print(platform.python_version())') from $py -> /usr/local (standard library only)"
    $SUDO tar -C "$py" -c --exclude='lib/python3.11/site-packages/*' --exclude='__pycache__' --exclude='lib/python3.11/test' \
      lib include share bin/python3.11 | $SUDO tar -C "$dir/usr/local" -x
    $SUDO ln -sf python3.11 "$dir/usr/local/bin/python3"; $SUDO ln -sf python3.11 "$dir/usr/local/bin/python"
    echo /usr/local/lib | $SUDO tee "$dir/etc/ld.so.conf.d/usr-local-python.conf" >/dev/null
    $SUDO chroot "$dir" /sbin/ldconfig
    $SUDO chroot "$dir" /usr/local/bin/python3 -m ensurepip --default-pip >/dev/null
  else
    say "no CPython >= 3.11.5 outside /usr here: the stand-ins keep Debian's python3.11 (3.11.2)"
  fi
  # This machine's CA bundle (pip's TLS checks).
  $SUDO cp /etc/ssl/certs/ca-certificates.crt "$dir/etc/ssl/certs/ca-certificates.crt"
  $SUDO rm -rf "$dir/var/cache/apt/archives/"*.deb "$dir/var/lib/apt/lists/"*
  $SUDO tar -C "$dir" -c . | docker import -c 'CMD ["bash"]' - "$ROOTFS_TAG" >/dev/null
  $SUDO rm -rf "$dir"
  say "root filesystem imported as $ROOTFS_TAG"
}

# pip's find-links folder on this machine (the CPU torch wheel), copied into the build context.
find_links() {
  local ctx=$1; mkdir -p "$ctx/wheels"
  local fl
  fl=$(pip config get global.find-links 2>/dev/null || true)
  fl=${fl:-${PIP_FIND_LINKS:-}}
  for d in $fl; do [ -d "$d" ] && cp -n "$d"/*.whl "$ctx/wheels/" 2>/dev/null || true; done
}

standin() {  # tag, what it is, extra Dockerfile lines
  local tag=$1 what=$2 extra=$3 ctx="$WORK/ctx-${1//[:\/]/_}"
  rm -rf "$ctx"; mkdir -p "$ctx"
  find_links "$ctx"
  cat >"$ctx/Dockerfile" <<EOF
FROM $ROOTFS_TAG
LABEL org.servelab.standin="$what" org.servelab.standin-for="$tag"
ENV SERVELAB_STANDIN="$tag stand-in: $what" \\
    LANG=C.UTF-8 \\
    PIP_CERT=/etc/ssl/certs/ca-certificates.crt \\
    PIP_FIND_LINKS=/opt/standin-wheels
COPY wheels/ /opt/standin-wheels/
$extra
EOF
  docker build -q -t "$tag" "$ctx" >/dev/null
  rm -rf "$ctx"
  say "$tag: stand-in built ($what)"
}

# A stand-in build that fails must not leave a half-made tag that later runs would take for the real image.
trap 'say "failed; no stand-in was left half-built"' ERR

need_py=0 need_cuda=0 need_triton=0
want_real "$PY_TAG" || need_py=1
want_real "$CUDA_TAG" || need_cuda=1
want_real "$TRITON_TAG" || need_triton=1
if [ $((need_py + need_cuda + need_triton)) -gt 0 ]; then build_rootfs; fi

# Python's official image has python at /usr/local and no EXTERNALLY-MANAGED marker; Debian's python3.11 has one.
[ $need_py = 1 ] && standin "$PY_TAG" "Debian 12 packages and this machine's CPython 3.11 in /usr/local" '
RUN rm -f /usr/lib/python3.11/EXTERNALLY-MANAGED && ln -sf pip3 /usr/local/bin/pip
CMD ["python3"]'

[ $need_cuda = 1 ] && standin "$CUDA_TAG" "Debian 12, no CUDA and no cuDNN: a CPU rehearsal of the CUDA base" '
ENV NVIDIA_VISIBLE_DEVICES="" '

# The bundled tritonserver, laid out where NVIDIA's image has it (/opt/tritonserver/bin on PATH), run through a
# wrapper that supplies what the wheel needs outside PyTriton: the python backend folder and libpython's dir.
[ $need_triton = 1 ] && standin "$TRITON_TAG" "tritonserver 2.51 from the nvidia-pytriton wheel, python backend only (no onnxruntime backend, no GPU)" "
RUN rm -f /usr/lib/python3.11/EXTERNALLY-MANAGED \\
 && python3 -m pip install --no-cache-dir -q $PYTRITON_PIN $ORT_PIN $NUMPY_PIN $PILLOW_PIN \\
 && site=\$(python3 -c 'import pytriton, os; print(os.path.dirname(pytriton.__file__))') \\
 && mkdir -p /opt/tritonserver/bin /opt/tritonserver/backends/python \\
 && ln -s \$site/tritonserver/backends/python/libtriton_python.so /opt/tritonserver/backends/python/ \\
 && ln -s \$site/tritonserver/backends/python/triton_python_backend_utils.py /opt/tritonserver/backends/python/ \\
 && ln -s \$site/tritonserver/python_backend_stubs/3.11/triton_python_backend_stub /opt/tritonserver/backends/python/ \\
 && printf '#!/bin/sh\\n# stand-in: the tritonserver bundled in nvidia-pytriton, with its python backend\\nexport LD_LIBRARY_PATH=%s\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}\\nexec %s/tritonserver/bin/tritonserver --backend-directory=/opt/tritonserver/backends \"\$@\"\\n' \"\$(python3 -c 'import sysconfig; print(sysconfig.get_config_var(\"LIBDIR\"))')\" \"\$site\" > /opt/tritonserver/bin/tritonserver \\
 && chmod 755 /opt/tritonserver/bin/tritonserver \\
 && groupadd --gid 1000 triton-server && useradd --uid 1000 --gid triton-server --home-dir /home/triton-server --create-home --shell /bin/bash triton-server
ENV PATH=/opt/tritonserver/bin:\$PATH
WORKDIR /opt/tritonserver
CMD [\"tritonserver\", \"--help\"]"

trap - ERR
for tag in "$PY_TAG" "$CUDA_TAG" "$TRITON_TAG"; do
  printf '[standin] %-46s %s\n' "$tag" "$(docker image inspect -f '{{with index .Config.Labels "org.servelab.standin"}}STAND-IN: {{.}}{{else}}real image{{end}}' "$tag")"
done
