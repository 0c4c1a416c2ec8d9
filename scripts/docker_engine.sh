#!/usr/bin/env bash
# A Docker engine for the tests that build images and start containers (`make test` calls this around pytest).
#
#   bash scripts/docker_engine.sh start   # an engine that answers is used as it is; else, as root, install + start one
#   bash scripts/docker_engine.sh stop    # stops the engine only if `start` started it
#
# On your own machine an engine that already answers is never reconfigured, started or stopped; without one
# (and not root) nothing happens and the engine tests are skipped with the reason shown. As root with no engine
# (CI), it installs Debian's docker.io (dockerd 20.10) if missing, and the compose and buildx CLI plugins from
# Debian 13's packages if missing: Compose v2 is not packaged for Debian 12, and Debian 13's docker-compose
# (2.26, one Go binary) runs here as a CLI plugin. Taken from Debian's archive with apt, so its signature is
# checked against the system's archive keyring, unlike a repackaging on PyPI. It then starts dockerd in the
# background (no systemd here) and records its pid in build/docker-engine.pid for `stop`. That engine runs at
# a lower CPU priority (nice 10, which its builds and containers inherit): the suite's other worker runs the
# smoke lab, whose timed exercises are graded, and a build beside it must not take the cores it measures on.
set -euo pipefail
cd "$(dirname "$0")/.."
PIDFILE=build/docker-engine.pid
LOG=build/docker-engine.log
PLUGINS=${DOCKER_CLI_PLUGINS_DIR:-/usr/local/lib/docker/cli-plugins}
say() { printf '[docker-engine] %s\n' "$*"; }
answers() { timeout 10 docker info >/dev/null 2>&1; }

plugins_from_debian13() {  # docker-compose and docker-buildx from Debian 13, unpacked as CLI plugins
  local work; work=$(mktemp -d)
  mkdir -p "$work/lists/partial" "$work/cache/archives/partial"
  echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main" > "$work/sources.list"
  local opts=(-o "Dir::Etc::SourceList=$work/sources.list" -o Dir::Etc::SourceParts=/dev/null
              -o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache" -o APT::Sandbox::User=root)
  apt-get "${opts[@]}" update -qq
  (cd "$work" && apt-get "${opts[@]}" download -qq "$@")
  mkdir -p "$PLUGINS"
  for deb in "$work"/*.deb; do dpkg-deb -x "$deb" "$work/x"; done
  cp "$work"/x/usr/libexec/docker/cli-plugins/* "$PLUGINS/"
  rm -rf "$work"
}

start() {
  if answers; then
    say "an engine answers: using it as it is ($(docker version -f '{{.Server.Version}}' 2>/dev/null))"
  elif [ "$(id -u)" != 0 ]; then
    say "no Docker engine answers and this is not root: the tests that need one will be skipped"
    return 0
  else
    if ! command -v dockerd >/dev/null; then
      say "installing Debian's docker.io"
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io >/dev/null
    fi
    mkdir -p build
    say "starting dockerd (log: $LOG)"
    nohup nice -n 10 dockerd >"$LOG" 2>&1 &
    echo $! > "$PIDFILE"
    for _ in $(seq 60); do answers && break; sleep 1; done
    answers || { say "dockerd did not answer within 60 s: see $LOG"; tail -5 "$LOG"; stop; return 1; }
  fi
  local missing=()
  docker compose version >/dev/null 2>&1 || missing+=(docker-compose)
  docker buildx version >/dev/null 2>&1 || missing+=(docker-buildx)
  if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ]; then
      say "installing the ${missing[*]} CLI plugin(s) from Debian 13's packages"
      plugins_from_debian13 "${missing[@]}"
    else
      say "missing CLI plugin(s): ${missing[*]}; the tests that need them will be skipped"
    fi
  fi
  say "engine $(docker version -f '{{.Server.Version}}'), $(docker compose version 2>/dev/null || echo 'no compose')"
}

stop() {
  [ -f "$PIDFILE" ] || return 0
  local pid; pid=$(cat "$PIDFILE")
  say "stopping the dockerd this script started (pid $pid)"
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
  rm -f "$PIDFILE"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
