#!/usr/bin/env bash
# Runs ON THE GPU NODE (uploaded and started by servelab.provision, or by hand: `bash node_bootstrap.sh`).
# Idempotent: installs only what is missing, pulls instead of re-cloning, and `compose up -d` is a no-op for
# a stack that is already up. Needs: Ubuntu 22.04/24.04 with the NVIDIA driver (Chameleon's CC-*-CUDA images).
#   REPO_URL (required)  git URL to clone          REPO_REF   branch/tag/commit (default main)
#   REMOTE_DIR           clone folder (~/servelab)   STACKS     compose steps to bring up, e.g. "04-triton"
#   SERVELAB_GPUS        GPU ids for Triton's instance groups, e.g. 0,1 (default: all)
#   SKIP_PREPARE=1       do not run the export + stage step
set -euo pipefail
: "${REPO_URL:?set REPO_URL to the git URL of servelab}"
REPO_REF=${REPO_REF:-main}
REMOTE_DIR=${REMOTE_DIR:-servelab}
STACKS=${STACKS:-04-triton}
SUDO=$([ "$(id -u)" = 0 ] || echo sudo)
say() { printf '[node-bootstrap] %s\n' "$*"; }

command -v nvidia-smi >/dev/null || { say "no nvidia-smi: this image has no NVIDIA driver (use a *-CUDA image)"; exit 1; }
DRIVER=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -n1)
say "GPUs: $(nvidia-smi --query-gpu=name --format=csv,noheader | paste -sd, -) (driver $DRIVER)"
if [ "${DRIVER%%.*}" -lt 580 ]; then
  say "WARNING: driver $DRIVER < 580; the CUDA 13 images need 580+ (data-center GPUs may run via forward compatibility)"
fi

if ! command -v docker >/dev/null; then
  say "installing Docker Engine and the compose plugin (Ubuntu packages)"
  $SUDO apt-get update -qq
  $SUDO DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io docker-compose-v2 git curl gnupg
  $SUDO usermod -aG docker "$(id -un)" || true
fi
if ! dpkg -s nvidia-container-toolkit >/dev/null 2>&1; then
  say "installing the NVIDIA container toolkit (NVIDIA's apt repository)"
  curl -fsSL https://nvidia.github.io/libnvidia-container/gpgkey \
    | $SUDO gpg --dearmor --yes -o /usr/share/keyrings/nvidia-container-toolkit-keyring.gpg
  curl -fsSL https://nvidia.github.io/libnvidia-container/stable/deb/nvidia-container-toolkit.list \
    | sed 's#deb https://#deb [signed-by=/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg] https://#g' \
    | $SUDO tee /etc/apt/sources.list.d/nvidia-container-toolkit.list >/dev/null
  $SUDO apt-get update -qq
  $SUDO DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nvidia-container-toolkit
  $SUDO nvidia-ctk runtime configure --runtime=docker
  $SUDO systemctl restart docker
fi
DOCKER="$SUDO docker"
$DOCKER compose version >/dev/null || { say "docker compose plugin missing"; exit 1; }
say "GPU inside a container:"
$DOCKER run --rm --gpus all nvidia/cuda:13.0.2-base-ubuntu24.04 nvidia-smi -L

if [ -d "$REMOTE_DIR/.git" ]; then
  say "updating $REMOTE_DIR to $REPO_REF"
  git -C "$REMOTE_DIR" fetch --quiet origin && git -C "$REMOTE_DIR" checkout --quiet "$REPO_REF"
  git -C "$REMOTE_DIR" pull --quiet --ff-only origin "$REPO_REF" 2>/dev/null || true
else
  say "cloning $REPO_URL ($REPO_REF) into $REMOTE_DIR"
  git clone --quiet "$REPO_URL" "$REMOTE_DIR" && git -C "$REMOTE_DIR" checkout --quiet "$REPO_REF"
fi
cd "$REMOTE_DIR"
mkdir -p artifacts models results
SERVELAB_UID=$(id -u)
SERVELAB_GID=$(id -g)
export SERVELAB_UID SERVELAB_GID SERVELAB_GPUS="${SERVELAB_GPUS:-}"
# The node's Jupyter needs a token: one per node, kept outside the clone, readable only by this user.
TOKEN_FILE="$HOME/.servelab_jupyter_token"
[ -s "$TOKEN_FILE" ] || (umask 077; head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$TOKEN_FILE")
export JUPYTER_TOKEN=${JUPYTER_TOKEN:-$(cat "$TOKEN_FILE")}

if [ "${SKIP_PREPARE:-0}" != 1 ]; then
  say "export + stage the GPU Triton repository (docker/compose.00-prepare.yaml)"
  $DOCKER compose -f docker/compose.00-prepare.yaml run --rm prepare
fi
for stack in $STACKS; do
  say "bringing up docker/compose.$stack.yaml"
  $DOCKER compose -f "docker/compose.$stack.yaml" up -d --build --wait
done
$DOCKER ps --format 'table {{.Names}}\t{{.Status}}\t{{.Ports}}'
say "Jupyter token (if the jupyter stack is up): in $TOKEN_FILE"
say "done. From your machine: ssh -N -L 8000:127.0.0.1:8000 -L 8001:127.0.0.1:8001 -L 8002:127.0.0.1:8002 -L 8080:127.0.0.1:8080 -L 8888:127.0.0.1:8888 $(id -un)@<floating-ip>"
