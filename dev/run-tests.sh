#!/usr/bin/env bash
# Runs the whole suite (what `make test` and CI run). pytest's exit code 5 (no tests
# collected) is a failure here: a suite that ran nothing proves nothing.
#
# Three pytest-xdist workers on this 2-core machine (with two the CPUs were idle a sixth of the
# run: the tests wait on batches, brokers and clusters; docs/testing.md has both runs), whole
# files per worker (module fixtures stay in one process), longest files first
# (tests/conftest.py orders them by tests/durations.json; xdist's own reorder, by number of
# tests, would leave the few-test heavy files for the end).
# The workers share one stack (Kafka, the S3 regions) and, when their tests ask for them,
# one YARN cluster, HDFS, Spark standalone cluster and region pair of each mirror policy
# (tests/shared_parts.py); each has its own Spark session and Airflow home.
# STREAMSTATE_TEST_WORKERS=0 runs in one process. docs/testing.md says more.
#
# At the end it prints the run's cost: pytest's slowest tests, then the total work and the
# heaviest files (dev/test_durations.py, from a JUnit report: pass --junitxml=PATH to keep it),
# and before them the CPU by kind of process and by test file (dev/measure.py).
set -u
cd "$(dirname "$0")/.."
workers="${STREAMSTATE_TEST_WORKERS:-3}"
if [ "$workers" = "0" ]; then
  dist=()
else
  dist=(-n "$workers" --dist loadfile --no-loadscope-reorder)
fi
junit=""
for arg in "$@"; do
  case "$arg" in --junitxml=*) junit="${arg#--junitxml=}" ;; esac
done
report=()
if [ -z "$junit" ]; then
  junit="$(mktemp "${TMPDIR:-/tmp}/streamstate-junit.XXXXXX.xml")"
  trap 'rm -f "$junit"' EXIT
  report=(--junitxml="$junit")
fi
# pytest runs through dev/measure.py, which prints where the CPU went, by kind of process and
# by test file, and how busy the machine was (below 100%, more workers could end it sooner);
# STREAMSTATE_CPU_REPORT=PATH keeps it as JSON.
cpu_json=()
[ -n "${STREAMSTATE_CPU_REPORT:-}" ] && cpu_json=(--json "$STREAMSTATE_CPU_REPORT")
started=$SECONDS
.venv/bin/python dev/measure.py --top 25 "${cpu_json[@]}" -- \
  .venv/bin/pytest "${dist[@]}" --durations=25 "${report[@]}" "$@"
rc=$?
if [ -s "$junit" ]; then
  echo
  .venv/bin/python dev/test_durations.py --summary "$junit" --wall "$((SECONDS - started))" --top 25
fi
if [ "$rc" -eq 5 ]; then
  echo "error: pytest collected no tests" >&2
  exit 1
fi
exit "$rc"
