#!/usr/bin/env bash
# Keeps a finished run's results.json in a history directory (one folder a run, named by its run id), outside the
# report directory the next `make qualify` deletes: the plan line estimates the next run from them
# (--vsnap-plan-history) and `vsnap-qual history DIR` trends them. A run that wrote no results.json (refused before
# it started) keeps nothing. Usage: scripts/keep-run.sh REPORT_DIR HISTORY_DIR
set -euo pipefail
report="${1:?usage: keep-run.sh REPORT_DIR HISTORY_DIR}"
history="${2:?usage: keep-run.sh REPORT_DIR HISTORY_DIR}"
[ -f "$report/results.json" ] || { echo "keep-run: $report holds no results.json: nothing kept" >&2; exit 0; }
run_id="$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["run"]["run_id"] or "")' \
  "$report/results.json" 2>/dev/null || true)"
night="$history/${run_id:-$(date -u +%Y%m%dT%H%M%SZ)-$$}"
mkdir -p "$night"
cp "$report/results.json" "$night/results.json"
echo "keep-run: kept $report/results.json in $night (the next run's plan line estimates from $history)" >&2
