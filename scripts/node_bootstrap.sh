#!/usr/bin/env bash
# Runs ON THE GPU NODE (uploaded and started by servelab.provision, or by hand: `bash node_bootstrap.sh`).
# Idempotent: installs only what is missing, pulls instead of re-cloning, and `compose up -d` is a no-op for
# a stack that is already up. Needs: Ubuntu 22.04/24.04 with NVIDIA driver >= 580 (Chameleon's *-CUDA images).
#   REPO_URL (required)  git URL to clone          REPO_REF   branch/tag/commit (default main)
#   REMOTE_DIR           clone folder (~/servelab)   STACKS     compose steps to bring up (default "06a-all-backends jupyter": the service on 8080 and Triton on 8000-8002, which a full lab run needs, and JupyterLab)
#   SERVELAB_INSTANCES   Triton encoder instances per GPU (default 1)
#   SERVELAB_LAB_PROFILE the lab profile the stacks must admit (default gpu): the prepare step writes its largest
#                        batch and client count into docker/.env as the service's limits and stages Triton with them
#   SERVELAB_TRITON_GPU / SERVELAB_SERVICE_GPU   the node's GPU id for Triton / the service (default 0)
#   SERVELAB_PRETRAINED, SERVELAB_CHECKPOINT, SERVELAB_SEED   the weights every container uses
#   SKIP_PREPARE=1       do not run the export + stage step
#   SERVELAB_REHEARSAL=1 the CPU rehearsal (`make rehearse-node`): no GPU, no driver, no toolkit; the Docker engine
#                        that answers is used as it is (even one older than DOCKER_FLOOR, while every port is
#                        published on 127.0.0.1: see below); SERVELAB_COMPOSE_OVERRIDE names the override file
#   SERVELAB_COMPOSE_OVERRIDE  a compose file added to every compose call (e.g. docker/rehearsal.override.yaml)
# The weights are written once, to docker/.env, which every compose call in docker/ reads by itself (compose's
# project folder is docker/), so the README's later commands need not repeat them. Triton's key
# (SERVELAB_TRITON_KEY: its model control answers no request without it) is drawn anew by every run, into the same
# file, which only this user can read.
# Every compose call gets these variables explicitly (`sudo env VAR=… docker …`): sudo's env_reset would drop
# them, and compose would silently fall back to its defaults.
set -euo pipefail
: "${REPO_URL:?set REPO_URL to the git URL of servelab}"
REPO_REF=${REPO_REF:-main}
REMOTE_DIR=${REMOTE_DIR:-servelab}
STACKS=${STACKS:-06a-all-backends jupyter}
DRIVER_FLOOR=580  # CUDA 13.0 (the servelab GPU image, Triton 25.10) needs the R580 driver
# Docker Engine 28.0.0 is the first that keeps ports published on 127.0.0.1 away from other machines of the local
# network (older engines let them route packets to such ports); Triton's ports are published only there
DOCKER_FLOOR=28.0.0
DOCKER_DAEMON_JSON=${DOCKER_DAEMON_JSON:-/etc/docker/daemon.json}
SUDO=$([ "$(id -u)" = 0 ] || echo sudo)
say() { printf '[node-bootstrap] %s\n' "$*"; }
version_at_least() { [ -n "$1" ] && [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n1)" = "$2" ]; }

REHEARSAL=${SERVELAB_REHEARSAL:-0}
if [ "$REHEARSAL" = 1 ]; then
  say "CPU rehearsal: no GPU, driver or container toolkit checked or installed; the running Docker engine is used as it is"
  docker info >/dev/null 2>&1 || { say "no Docker engine answers: start one first"; exit 1; }
else
command -v nvidia-smi >/dev/null || { say "no nvidia-smi: this image has no NVIDIA driver (use a *-CUDA image)"; exit 1; }
DRIVER=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -n1)
say "GPUs: $(nvidia-smi --query-gpu=name --format=csv,noheader | paste -sd, -) (driver $DRIVER)"
if [ "${DRIVER%%.*}" -lt "$DRIVER_FLOOR" ]; then
  say "driver $DRIVER is older than R$DRIVER_FLOOR, which CUDA 13 (the servelab GPU image and Triton 25.10) needs:"
  say "use a newer *-CUDA image or install driver >= $DRIVER_FLOOR"
  exit 1
fi

restart_docker=0
if ! command -v docker >/dev/null; then
  # Docker's own apt repository: Ubuntu's docker.io may be older than DOCKER_FLOOR
  say "installing Docker Engine and the compose plugin (Docker's apt repository)"
  $SUDO apt-get update -qq
  $SUDO DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ca-certificates curl git gnupg
  $SUDO install -m 0755 -d /etc/apt/keyrings
  curl -fsSL https://download.docker.com/linux/ubuntu/gpg | $SUDO tee /etc/apt/keyrings/docker.asc >/dev/null
  $SUDO chmod a+r /etc/apt/keyrings/docker.asc
  echo "deb [arch=$(dpkg --print-architecture) signed-by=/etc/apt/keyrings/docker.asc] https://download.docker.com/linux/ubuntu $(. /etc/os-release && echo "${UBUNTU_CODENAME:-$VERSION_CODENAME}") stable" \
    | $SUDO tee /etc/apt/sources.list.d/docker.list >/dev/null
  $SUDO apt-get update -qq
  $SUDO DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker-ce docker-ce-cli containerd.io docker-compose-plugin
  if [ -n "$SUDO" ]; then
    $SUDO usermod -aG docker "$(id -un)" && say "added $(id -un) to the docker group: it takes effect in a new SSH session"
  fi
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
  restart_docker=1
fi
# Known toolkit issue (NVIDIA/nvidia-container-toolkit#48): with the systemd cgroup driver, a `systemctl
# daemon-reload` (any package install does one) takes the GPU devices away from running containers, which then
# fail with "Failed to initialize NVML: Unknown Error". The Chameleon serving lab's workaround, applied here:
# Docker's cgroupfs driver (exec-opts in daemon.json, merged, nothing else in the file changed).
if ! grep -q 'native.cgroupdriver=cgroupfs' "$DOCKER_DAEMON_JSON" 2>/dev/null; then
  say "Docker: cgroupfs cgroup driver (GPU containers keep NVML across systemd reloads)"
  $SUDO python3 - "$DOCKER_DAEMON_JSON" <<'PY'
import json, os, sys
path = sys.argv[1]
cfg = json.load(open(path)) if os.path.exists(path) and os.path.getsize(path) else {}
opts = [o for o in cfg.get("exec-opts", []) if not o.startswith("native.cgroupdriver=")]
cfg["exec-opts"] = opts + ["native.cgroupdriver=cgroupfs"]
os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
with open(path + ".tmp", "w") as f:
    json.dump(cfg, f, indent=2)
os.replace(path + ".tmp", path)
PY
  restart_docker=1
fi
if [ "$restart_docker" = 1 ]; then
  $SUDO systemctl restart docker
fi
fi  # not a rehearsal

ENGINE=$($SUDO env docker version --format '{{.Server.Version}}' 2>/dev/null || true)
if ! version_at_least "$ENGINE" "$DOCKER_FLOOR"; then
  if [ "$REHEARSAL" = 1 ] && [ "${SERVELAB_BIND:-127.0.0.1}" = 127.0.0.1 ]; then
    say "CPU rehearsal: Docker engine ${ENGINE:-unknown} is older than $DOCKER_FLOOR, allowed only because this is the rehearsal and every port is published on 127.0.0.1 (a node refuses it)"
  else
    say "Docker engine ${ENGINE:-unknown} is older than $DOCKER_FLOOR, the first that keeps ports published on 127.0.0.1 (Triton's) from the local network: upgrade it from Docker's apt repository (https://docs.docker.com/engine/install/ubuntu/) and run this again"
    exit 1
  fi
fi

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
# The node's Jupyter needs a token: one per node, kept outside the clone, readable only by this user.
TOKEN_FILE="$HOME/.servelab_jupyter_token"
[ -s "$TOKEN_FILE" ] || (umask 077; head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$TOKEN_FILE")

# The weights, once, in docker/.env: compose reads it for every file in docker/, so the prepare step, the stacks
# and the README's `run --rm lab` all use the same weights (a variable set in the shell still wins). Written when
# asked for, or when there is none yet; never silently changed back to random-init.
if [ -n "${SERVELAB_PRETRAINED:-}${SERVELAB_CHECKPOINT:-}${SERVELAB_SEED:-}" ] || [ ! -s docker/.env ]; then
  mkdir -p docker
  (umask 077; printf '# written by scripts/node_bootstrap.sh: the weights every container on this node uses\nSERVELAB_PRETRAINED=%s\nSERVELAB_CHECKPOINT=%s\nSERVELAB_SEED=%s\n' \
    "${SERVELAB_PRETRAINED:-}" "${SERVELAB_CHECKPOINT:-}" "${SERVELAB_SEED:-0}" > docker/.env)
fi
say "weights (docker/.env): $(grep -E '^SERVELAB_(PRETRAINED|CHECKPOINT|SEED)=' docker/.env | paste -sd' ' -)"
# Triton's key for this start of the stacks, beside the weights; the file is this user's alone
TRITON_KEY=$(python3 -c 'import secrets; print(secrets.token_urlsafe(32))')
(umask 077; { grep -v '^SERVELAB_TRITON_KEY=' docker/.env || true; echo "SERVELAB_TRITON_KEY=$TRITON_KEY"; } > docker/.env.new)
chmod 600 docker/.env.new && mv docker/.env.new docker/.env
say "Triton's key for model control: SERVELAB_TRITON_KEY in docker/.env (docs/SECURITY.md)"

# JupyterLab's token goes to compose through docker/.env (this user's alone), never on a command line
(umask 077; { grep -v '^JUPYTER_TOKEN=' docker/.env || true; echo "JUPYTER_TOKEN=${JUPYTER_TOKEN:-$(cat "$TOKEN_FILE")}"; } > docker/.env.new)
chmod 600 docker/.env.new && mv docker/.env.new docker/.env
COMPOSE_ENV=(
  "SERVELAB_UID=$(id -u)" "SERVELAB_GID=$(id -g)"
  "SERVELAB_INSTANCES=${SERVELAB_INSTANCES:-1}"
  "SERVELAB_LAB_PROFILE=${SERVELAB_LAB_PROFILE:-gpu}"
  "SERVELAB_TRITON_GPU=${SERVELAB_TRITON_GPU:-0}" "SERVELAB_SERVICE_GPU=${SERVELAB_SERVICE_GPU:-0}"
)
OVERRIDE=()
if [ -n "${SERVELAB_COMPOSE_OVERRIDE:-}" ]; then
  OVERRIDE=(-f "$SERVELAB_COMPOSE_OVERRIDE")
  say "every compose call adds $SERVELAB_COMPOSE_OVERRIDE"
fi
docker_() { $SUDO env "${COMPOSE_ENV[@]}" docker "$@"; }
compose_() { local file=$1; shift; docker_ compose -f "$file" "${OVERRIDE[@]}" "$@"; }

docker_ compose version >/dev/null || { say "docker compose plugin missing"; exit 1; }
if [ "$REHEARSAL" != 1 ]; then
  say "GPU inside a container:"
  docker_ run --rm --gpus all nvidia/cuda:13.0.2-base-ubuntu24.04 nvidia-smi -L
fi

if [ "${SKIP_PREPARE:-0}" != 1 ]; then
  say "export + stage the Triton repository (docker/compose.00-prepare.yaml)"
  compose_ docker/compose.00-prepare.yaml run --rm prepare
fi
for stack in $STACKS; do
  say "bringing up docker/compose.$stack.yaml"
  # the stack's own services, named: an override file may describe services of other stacks too
  mapfile -t services < <(docker_ compose -f "docker/compose.$stack.yaml" config --services)
  compose_ "docker/compose.$stack.yaml" up -d --build --wait "${services[@]}"
done
docker_ ps --format 'table {{.Names}}\t{{.Status}}\t{{.Ports}}'
say "Jupyter token (if the jupyter stack is up): in $TOKEN_FILE"
say "done. From your machine: ssh -N -L 8000:127.0.0.1:8000 -L 8001:127.0.0.1:8001 -L 8002:127.0.0.1:8002 -L 8080:127.0.0.1:8080 -L 8888:127.0.0.1:8888 $(id -un)@<floating-ip>"
