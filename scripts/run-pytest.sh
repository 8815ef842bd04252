#!/usr/bin/env bash
# Run pytest and refuse exit code 5 ("no tests collected"): a test command that ran nothing has failed.
set -uo pipefail
python3 -m pytest "$@"
code=$?
if [ "$code" -eq 5 ]; then
  echo "run-pytest: pytest collected no tests for: $* (exit 5) — treating as failure" >&2
  exit 1
fi
exit "$code"
