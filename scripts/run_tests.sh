#!/usr/bin/env bash
# The test suite as `make test` runs it, in three phases (tests/conftest.py says which test goes where):
#   1. everything but the ratio tests, on two pytest-xdist workers (one per core: this phase keeps both busy), the
#      container tests on one worker while the other runs the rest;
#   2. the ratio tests on the emulated device, on three workers: each uses a fraction of a core (the device waits),
#      so three side by side still leave each the spare CPU its ratios need;
#   3. the tests that assert a ratio the machine's spare CPU moves, one at a time, with nothing else running.
# Arguments go to every phase (e.g. `--durations=0`, or test paths). TEST_WORKERS sets phase 1's workers (default 2).
set -u
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}

SERVELAB_TEST_PHASE=parallel "$PY" -m pytest -n "${TEST_WORKERS:-2}" --no-loadscope-reorder \
  --durations=25 "$@"
parallel=$?
SERVELAB_TEST_PHASE=spare-cores "$PY" -m pytest -n 3 --no-loadscope-reorder --durations=10 "$@"
spare=$?
SERVELAB_TEST_PHASE=quiet "$PY" -m pytest --durations=10 "$@"
quiet=$?

# 5 is pytest's "no tests collected": a phase may have none when a selection holds no test of its kind
codes=("$parallel" "$spare" "$quiet")
if [ "$parallel" -eq 5 ] && [ "$spare" -eq 5 ] && [ "$quiet" -eq 5 ]; then exit 5; fi
for rc in "${codes[@]}"; do
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 5 ]; then exit "$rc"; fi
done
exit 0
