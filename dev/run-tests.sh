#!/usr/bin/env bash
# Runs the whole suite. pytest's exit code 5 (no tests collected) is a failure here:
# a suite that ran nothing proves nothing.
set -u
cd "$(dirname "$0")/.."
.venv/bin/pytest --durations=10 "$@"
rc=$?
if [ "$rc" -eq 5 ]; then
  echo "error: pytest collected no tests" >&2
  exit 1
fi
exit "$rc"
