#!/bin/sh
# Checks the model export (docker/preflight.py), then runs the given command (default: the service).
set -e
python /opt/servelab/docker/preflight.py
exec "$@"
