#!/usr/bin/env bash
# Run pytest and refuse exit code 5 ("no tests collected"): a test command that ran nothing has failed.
# With --no-skips (first argument), a skipped test also fails the run: `make test` must run every test it has;
# each skip is listed with its reason.
set -uo pipefail
no_skips=0
if [ "${1:-}" = "--no-skips" ]; then no_skips=1; shift; fi
junit="$(mktemp /tmp/run-pytest.XXXXXX.xml)"
trap 'rm -f "$junit"' EXIT
python3 -m pytest --junitxml="$junit" -o junit_family=xunit2 "$@"
code=$?
if [ "$code" -eq 5 ]; then
  echo "run-pytest: pytest collected no tests for: $* (exit 5) — treating as failure" >&2
  exit 1
fi
if [ "$no_skips" -eq 1 ] && [ -s "$junit" ]; then
  skipped="$(python3 - "$junit" <<'PY'
import sys
import xml.etree.ElementTree as ET

for case in ET.parse(sys.argv[1]).iter("testcase"):
    skip = case.find("skipped")
    if skip is not None:
        print(f"  {case.get('classname')}::{case.get('name')}: {skip.get('message', '')[:300]}")
PY
)"
  if [ -n "$skipped" ]; then
    echo "run-pytest: tests were skipped; every test of this command must run:" >&2
    echo "$skipped" >&2
    [ "$code" -eq 0 ] && code=1
  fi
fi
exit "$code"
