#!/bin/sh
# Checks the model export (docker/preflight.py, next to this script), then runs the given command
# (default: the service).
set -e
python "$(dirname "$0")/preflight.py"
exec "$@"
