#!/usr/bin/env bash
# Prometheus and promtool for the monitoring view (notebook 06a) and its test: Debian's `prometheus` package.
# Idempotent: does nothing where both binaries are already on PATH. Needs root (or sudo) for apt-get.
# Elsewhere, the official release tarball (https://prometheus.io/download/) gives the same two binaries;
# put them on PATH or point SERVELAB_PROMETHEUS at the `prometheus` binary.
set -euo pipefail

if command -v prometheus >/dev/null && command -v promtool >/dev/null; then
  exit 0
fi
SUDO=$([ "$(id -u)" = 0 ] || echo sudo)
echo "installing Debian prometheus (server + promtool) for the monitoring view"
$SUDO apt-get update -qq
# --no-install-recommends: the server and promtool only, no node exporter; the package's service is never
# started here (no systemd), the lab starts its own server on a free loopback port with a temporary data dir
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends prometheus >/dev/null
command -v prometheus >/dev/null && command -v promtool >/dev/null
