#!/usr/bin/env bash
# Runs ON THE GPU NODE, in the clone (after scripts/node_bootstrap.sh): a one-node kind cluster that can schedule
# `nvidia.com/gpu` pods, the baked GPU image loaded into it, k8s/overlays/gpu applied and rolled out (lab step 08).
# Idempotent: every step checks before it changes something. Needs kind and kubectl on PATH.
#   bash scripts/kind_gpu_cluster.sh
# The steps, in order (the same as NVIDIA's recipe for GPUs in kind):
#   1. host: NVIDIA runtime as Docker's default, accepting GPU requests as volume mounts (what the extraMounts
#      entry in k8s/kind/cluster.yaml is), Docker restarted;
#   2. kind create cluster with k8s/kind/cluster.yaml;
#   3. inside the kind node: the NVIDIA container toolkit, containerd's default runtime set to nvidia, containerd
#      restarted (the node is a container: it has none of this);
#   4. NVIDIA's device plugin (pinned release), then wait until the node advertises nvidia.com/gpu;
#   5. build the baked image if missing, `kind load` it, `kubectl apply -k k8s/overlays/gpu`, rollout status.
set -euo pipefail
CLUSTER=servelab                          # = name in k8s/kind/cluster.yaml
NODE="$CLUSTER-control-plane"
IMAGE=servelab:gpu-baked-0.1.0            # = newTag in k8s/overlays/gpu/kustomization.yaml
DEVICE_PLUGIN=https://raw.githubusercontent.com/NVIDIA/k8s-device-plugin/v0.17.1/deployments/static/nvidia-device-plugin.yml
SUDO=$([ "$(id -u)" = 0 ] || echo sudo)
say() { printf '[kind-gpu] %s\n' "$*"; }

for tool in docker kind kubectl nvidia-ctk; do
  command -v "$tool" >/dev/null || { say "$tool is not installed (kind/kubectl: see kind.sigs.k8s.io; the rest: scripts/node_bootstrap.sh)"; exit 1; }
done

say "1/5 host: NVIDIA runtime as Docker's default, GPU requests as volume mounts"
$SUDO nvidia-ctk runtime configure --runtime=docker --set-as-default
$SUDO nvidia-ctk config --set accept-nvidia-visible-devices-as-volume-mounts=true --in-place
$SUDO systemctl restart docker

if kind get clusters | grep -qx "$CLUSTER"; then
  say "2/5 cluster $CLUSTER exists"
else
  say "2/5 kind create cluster $CLUSTER"
  kind create cluster --name "$CLUSTER" --config k8s/kind/cluster.yaml
fi

say "3/5 kind node: NVIDIA container toolkit, containerd default runtime nvidia"
docker exec "$NODE" bash -euc '
  if ! command -v nvidia-ctk >/dev/null; then
    apt-get update -qq && apt-get install -y -qq curl gpg >/dev/null
    curl -fsSL https://nvidia.github.io/libnvidia-container/gpgkey \
      | gpg --dearmor --yes -o /usr/share/keyrings/nvidia-container-toolkit-keyring.gpg
    curl -fsSL https://nvidia.github.io/libnvidia-container/stable/deb/nvidia-container-toolkit.list \
      | sed "s#deb https://#deb [signed-by=/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg] https://#g" \
      > /etc/apt/sources.list.d/nvidia-container-toolkit.list
    apt-get update -qq && apt-get install -y -qq nvidia-container-toolkit >/dev/null
  fi
  nvidia-ctk runtime configure --runtime=containerd --set-as-default
  systemctl restart containerd
  umount -R /proc/driver/nvidia 2>/dev/null || true   # the runtime masks it; the toolkit needs the real one
'

say "4/5 NVIDIA device plugin; waiting for nvidia.com/gpu on the node"
kubectl apply -f "$DEVICE_PLUGIN"
for _ in $(seq 60); do
  gpus=$(kubectl get node "$NODE" -o jsonpath='{.status.allocatable.nvidia\.com/gpu}')
  [ -n "$gpus" ] && [ "$gpus" != 0 ] && break
  sleep 5
done
[ -n "${gpus:-}" ] && [ "$gpus" != 0 ] || { say "the node advertises no nvidia.com/gpu: kubectl -n kube-system logs ds/nvidia-device-plugin-daemonset"; exit 1; }
say "node $NODE: $gpus GPU(s)"

say "5/5 image $IMAGE, k8s/overlays/gpu, rollout"
docker image inspect "$IMAGE" >/dev/null 2>&1 \
  || docker build -f docker/Dockerfile.gpu --build-arg EXPORT_AT_BUILD=1 -t "$IMAGE" .
kind load docker-image "$IMAGE" --name "$CLUSTER"
kubectl apply -k k8s/overlays/gpu
kubectl -n servelab rollout status deploy/servelab --timeout=15m
say "done: kubectl -n servelab port-forward svc/servelab 8090:8002"
