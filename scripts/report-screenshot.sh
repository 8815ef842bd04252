#!/usr/bin/env bash
# The README's screenshot of a report: renders a finished run's report.html with this checkout's templates
# (`vsnap-qual report`, on a copy: the run's directory is left as it was) and photographs it with headless
# chromium into docs/report-screenshot.png. docs/report-screenshot.json records what it was made from: the sha256
# of every report template (a test fails when a template changes after the screenshot), the run, and the PNG's
# own sha256.
# Usage: scripts/report-screenshot.sh [REPORT_DIR]     (default reports/latest, what `make qualify` writes)
# Environment: CHROMIUM (default chromium; `apt-get install -y chromium`), VSNAP_QUAL (default .venv/bin/vsnap-qual),
# WINDOW (default 1400,2800: the verdict down to the KV chart), OUT (default docs/report-screenshot.png).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source_dir=${1:-$here/reports/latest}
chromium=${CHROMIUM:-chromium}
vsnap_qual=${VSNAP_QUAL:-$here/.venv/bin/vsnap-qual}
python=${PYTHON:-$here/.venv/bin/python}
window=${WINDOW:-1400,2800}
out=${OUT:-$here/docs/report-screenshot.png}
log() { echo "report-screenshot: $*" >&2; }

[[ -f "$source_dir/results.json" ]] || { log "$source_dir holds no results.json: run \`make qualify\` first"; exit 2; }
command -v "$chromium" >/dev/null || { log "$chromium not found: apt-get install -y chromium (or set CHROMIUM)"; exit 2; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp -a "$source_dir/." "$work/run"
# the run's verdict is its own: `report` exits with it (0 PASS, 1 FAIL, 3 PARTIAL, 4 INCOMPLETE); 2 is a failure here
rc=0
"$vsnap_qual" report "$work/run" >/dev/null || rc=$?
[[ $rc -ne 2 ]] || { log "vsnap-qual report could not read $source_dir"; exit 2; }
mkdir -p "$(dirname "$out")"
rm -f "$out"
"$chromium" --headless --no-sandbox --disable-gpu --hide-scrollbars --force-device-scale-factor=1 \
  --window-size="$window" --screenshot="$out" "file://$work/run/report.html" >"$work/chromium.log" 2>&1 || true
[[ -s "$out" ]] || { log "chromium wrote no screenshot:"; tail -20 "$work/chromium.log" >&2; exit 1; }
"$python" - "$here" "$work/run/results.json" "$source_dir" "$out" "$window" <<'EOF'
import hashlib, json, sys
from pathlib import Path

here, results_path, source, out, window = sys.argv[1:]
root = Path(here)
results = json.loads(Path(results_path).read_text())
run, verdict = results["run"], results["verdict"]
templates = root / "vsnap_qual" / "report" / "templates"
record = {
    "templates": {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(templates.rglob("*")) if p.is_file()
    },
    "run": {
        "run_id": run.get("run_id"),
        "source": source,
        "verdict": verdict.get("headline"),
        "started": run.get("started"),
        "ended": run.get("ended"),
        "harness_version": run.get("harness_version"),
    },
    "window": window,
    "png_sha256": hashlib.sha256(Path(out).read_bytes()).hexdigest(),
}
Path(out).with_suffix(".json").write_text(json.dumps(record, indent=2) + "\n")
print(f"{out}: {verdict.get('headline')} run {run.get('run_id')}, {len(record['templates'])} template(s) recorded")
EOF
