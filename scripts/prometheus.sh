#!/usr/bin/env bash
# Prometheus and promtool for the monitoring view (notebook 06c) and its tests: Debian's `prometheus` package.
# Does nothing where both binaries are already on PATH. Best effort: where it cannot install (no apt-get, not
# root and no sudo, no package mirror) it says so and exits 0 — the notebook then says in one line that no
# Prometheus could be started, and the tests that need it are skipped with the reason.
# Elsewhere (macOS, other distributions) the official release (https://prometheus.io/download/) gives the same
# two binaries: put `prometheus` and `promtool` on PATH.
set -uo pipefail

if command -v prometheus >/dev/null && command -v promtool >/dev/null; then
  exit 0
fi
if ! command -v apt-get >/dev/null; then
  echo "prometheus: no apt-get here; install Prometheus from https://prometheus.io/download/ for 06c's monitoring view"
  exit 0
fi
if [ "$(id -u)" = 0 ]; then
  SUDO=""
elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
  SUDO="sudo"
else
  echo "prometheus: not root and no passwordless sudo; run 'sudo apt-get install prometheus' for 06c's monitoring view"
  exit 0
fi
echo "installing Debian prometheus (server + promtool) for 06c's monitoring view"
# --no-install-recommends: the server and promtool, no node exporter. The package's own service is not used:
# the lab starts its own Prometheus on a free loopback port with a temporary data folder, and stops it.
if ! { $SUDO apt-get update -qq && \
       DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends prometheus >/dev/null; }; then
  echo "prometheus: apt-get could not install it; 06c's monitoring view will say so and its tests will be skipped"
fi
exit 0
