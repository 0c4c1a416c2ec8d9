#!/usr/bin/env bash
# The test suite as `make test` runs it, in two phases (tests/conftest.py says which test goes where):
#   1. everything but the CPU-ratio tests, on two pytest-xdist workers: much of the suite waits on servers,
#      emulated devices and containers, so the container tests run on one worker while the other runs the rest;
#   2. the tests that assert a ratio the machine's spare CPU moves, one at a time, with nothing else running.
# Arguments go to both phases (e.g. `--durations=0`, or test paths). TEST_WORKERS sets the workers (default 2).
set -u
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}

SERVELAB_TEST_PHASE=parallel "$PY" -m pytest -n "${TEST_WORKERS:-2}" --no-loadscope-reorder \
  --durations=25 "$@"
parallel=$?
SERVELAB_TEST_PHASE=quiet "$PY" -m pytest --durations=10 "$@"
quiet=$?

# 5 is pytest's "no tests collected": one phase may have none when a selection holds no test of its kind
if [ "$parallel" -eq 5 ] && [ "$quiet" -eq 5 ]; then exit 5; fi
for rc in "$parallel" "$quiet"; do
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 5 ]; then exit "$rc"; fi
done
exit 0
