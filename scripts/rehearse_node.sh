#!/usr/bin/env bash
# The GPU node, rehearsed on this CPU machine (`make rehearse-node`): the node's own bootstrap and the README's
# own commands, against a fresh clone of this repository's HEAD, with one override file
# (docker/rehearsal.override.yaml: no GPU reservations, the CPU stand-in images and repository). Then the smoke
# lab runs at place=node twice: inside the node's lab container, and from this machine through the published
# ports, as from a laptop at the other end of an SSH tunnel. Every row says which machine served it; every image
# built on a stand-in base says so (SERVELAB_STANDIN).
#
#   bash scripts/rehearse_node.sh                  # needs a Docker engine (make test starts one as root)
#   REHEARSAL_DIR=/tmp/x KEEP=1 bash scripts/rehearse_node.sh   # keep the stacks up afterwards
#
# Writes REHEARSAL_DIR (default build/rehearsal): clone/ (the "node's" clone, results/ of the container run in
# it), host-results/ (the run from this machine) and summary.json (each run's notebooks and wall time).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
DIR=$(mkdir -p "${REHEARSAL_DIR:-build/rehearsal}" && cd "${REHEARSAL_DIR:-build/rehearsal}" && pwd)
CLONE=$DIR/clone
OVERRIDE=docker/rehearsal.override.yaml
PROFILE=${REHEARSAL_PROFILE:-smoke}
PY=${PYTHON:-$ROOT/.venv/bin/python}
say() { printf '[rehearse-node] %s\n' "$*"; }
now() { date +%s; }

timeout 10 docker info >/dev/null 2>&1 || { say "no Docker engine answers (as root: bash scripts/docker_engine.sh start)"; exit 1; }
bash scripts/standin_images.sh

export SERVELAB_REHEARSAL=1 SERVELAB_COMPOSE_OVERRIDE=$OVERRIDE
export REPO_URL=$ROOT REPO_REF=$(git rev-parse HEAD) REMOTE_DIR=$CLONE STACKS="06a-all-backends jupyter"
export JUPYTER_TOKEN=${JUPYTER_TOKEN:-rehearsal-$(head -c 6 /dev/urandom | od -An -tx1 | tr -d ' \n')}
export SERVELAB_UID=$(id -u) SERVELAB_GID=$(id -g)
compose() { (cd "$CLONE" && docker compose "$@"); }
down() {
  [ "${KEEP:-0}" = 1 ] && { say "KEEP=1: stacks left up"; return; }
  say "taking the stacks down"
  for stack in 06a-all-backends jupyter; do
    compose -f "docker/compose.$stack.yaml" -f "$OVERRIDE" down --remove-orphans >/dev/null 2>&1 || true
  done
}
trap 'exit 130' INT TERM  # so the stacks come down on an interrupt too

# The node's clone: what the bootstrap would clone from your repository, here from this one's HEAD. A rehearsal
# killed before its trap ran (SIGKILL, a lost session) left its stacks up on the ports this one needs: down first.
[ -d "$CLONE/docker" ] && KEEP=0 down
rm -rf "$CLONE"
trap down EXIT

t0=$(now)
bash scripts/node_bootstrap.sh
t_boot=$(( $(now) - t0 ))
say "bootstrap done in ${t_boot}s"

# JupyterLab on the node answers (its API, with the token)
code=$(python3 -c "import os, urllib.request as u; print(u.urlopen(u.Request('http://127.0.0.1:8888/api/status', headers={'Authorization': 'token ' + os.environ['JUPYTER_TOKEN']}), timeout=10).status)")
say "JupyterLab answers: HTTP $code"

# The README's command, inside the node's lab container
t1=$(now)
compose -f docker/compose.jupyter.yaml -f "$OVERRIDE" run --rm lab \
  servelab lab run --place node --profile "$PROFILE" --run-id rehearsal-node --no-progress-bar
t_node=$(( $(now) - t1 ))

# The same from this machine, through the published ports, with the node's Triton key as a laptop takes it
# from the node's docker/.env (Triton's model control answers no request without it)
t2=$(now)
rm -rf "$DIR/host-results"
SERVELAB_TRITON_KEY=$(sed -n 's/^SERVELAB_TRITON_KEY=//p' "$CLONE/docker/.env") \
SERVELAB_PLACE=node SERVELAB_NODE_TRITON_MODEL=openclip_vit_b32_cpu \
  "$PY" -m servelab.cli lab run --place node --profile "$PROFILE" --run-id rehearsal-host \
  --results "$DIR/host-results" --no-progress-bar
t_host=$(( $(now) - t2 ))

"$PY" - "$CLONE/results/rehearsal-node/run.json" "$DIR/host-results/rehearsal-host/run.json" "$DIR/summary.json" \
  "$t_boot" "$t_node" "$t_host" <<'PY'
import json, sys
node, host, out, t_boot, t_node, t_host = sys.argv[1:7]
def runs(path, where, seconds):
    d = json.load(open(path))
    nbs = d.get("notebooks") or []
    ok = [n["id"] for n in nbs if n.get("status") == "ok"]
    return {"from": where, "notebooks": len(nbs), "ok": len(ok), "failed": [n["id"] for n in nbs if n.get("status") != "ok"],
            "wall_s": int(seconds)}
summary = {"bootstrap_s": int(t_boot), "runs": [runs(node, "the node's lab container", t_node),
                                                runs(host, "this machine through the published ports", t_host)]}
json.dump(summary, open(out, "w"), indent=2)
for r in summary["runs"]:
    print(f"[rehearse-node] {r['from']}: {r['ok']}/{r['notebooks']} notebooks ok in {r['wall_s']} s"
          + (f"; failed: {', '.join(r['failed'])}" if r["failed"] else ""))
sys.exit(0 if all(r["ok"] == r["notebooks"] > 0 for r in summary["runs"]) else 1)
PY
