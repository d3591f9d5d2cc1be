#!/usr/bin/env bash
# Runs the whole suite. pytest's exit code 5 (no tests collected) is a failure here:
# a suite that ran nothing proves nothing.
#
# Two pytest-xdist workers, whole files per worker (module fixtures stay in one process),
# longest files first (tests/conftest.py orders them by tests/durations.json; xdist's own
# reorder, by number of tests, would leave the few-test heavy files for the end).
# Each worker has its own stack, Spark session and Airflow home, shared by its tests:
# half the integration tests wait on streams, brokers and timers rather than on the CPU.
# STREAMSTATE_TEST_WORKERS=0 runs in one process.
set -u
cd "$(dirname "$0")/.."
workers="${STREAMSTATE_TEST_WORKERS:-2}"
if [ "$workers" = "0" ]; then
  dist=()
else
  dist=(-n "$workers" --dist loadfile --no-loadscope-reorder)
fi
.venv/bin/pytest "${dist[@]}" --durations=15 "$@"
rc=$?
if [ "$rc" -eq 5 ]; then
  echo "error: pytest collected no tests" >&2
  exit 1
fi
exit "$rc"
