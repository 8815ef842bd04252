#!/usr/bin/env bash
# Nightly GPU qualification: doctor, then the suites against the nightly image with the base image as the
# second arm; exits with the qualification's verdict. Called by .buildkite/nightly.yml and
# .github/workflows/nightly.yml. Dry run (prints the commands, runs nothing): VSNAP_DRY_RUN=1.
#
# Required: VSNAP_IMAGE (e.g. vllm/vllm-openai:nightly-<sha>). Optional: VSNAP_BASE_IMAGE, VSNAP_MODEL,
# VSNAP_REVISION, VSNAP_MODEL_CACHE, VSNAP_OVERLAY, VSNAP_GPUS, REPORT_DIR (default reports/nightly).
set -euo pipefail
cd "$(dirname "$0")/.."
: "${VSNAP_IMAGE:?set VSNAP_IMAGE to the nightly image tag}"
export VSNAP_MODEL="${VSNAP_MODEL:-Qwen/Qwen3-0.6B}"
export VSNAP_REVISION="${VSNAP_REVISION:-c1899de289a04d12100db370d81485cdf75e47ca}"
export VSNAP_PRIVILEGES="${VSNAP_PRIVILEGES:-privileged}"
REPORT_DIR="${REPORT_DIR:-reports/nightly}"

run() {
  echo "+ $*"
  if [ "${VSNAP_DRY_RUN:-0}" != "1" ]; then "$@"; fi
}

run python3 -m pip install -q -e .
run vsnap-qual doctor
base_args=()
if [ -n "${VSNAP_BASE_IMAGE:-}" ]; then base_args=(--vsnap-base-image="$VSNAP_BASE_IMAGE"); fi
# -c /dev/null: not the repository's reference-engine defaults in suites/pytest.ini
status=0
run python3 -m pytest -c /dev/null -p vsnap_qual -p xdist --dist loadgroup -n 2 --rootdir=. suites/ \
  --vsnap-report-dir="$REPORT_DIR" --junitxml="$REPORT_DIR/junit.xml" "${base_args[@]}" \
  ${VSNAP_ANNOTATE:+--vsnap-annotate} || status=$?
if [ "$status" -eq 5 ]; then echo "nightly: no tests ran" >&2; status=1; fi
exit "$status"
