#!/usr/bin/env bash
# Nightly GPU qualification: pull, doctor, then the suites against the nightly image with the released base image
# as the second arm; exits with the qualification's verdict. Called by .buildkite/nightly.yml and
# .github/workflows/nightly.yml. Dry run (prints the commands, runs nothing): VSNAP_DRY_RUN=1.
#
# Required: VSNAP_IMAGE (e.g. vllm/vllm-openai:nightly-<sha>) and VSNAP_MODEL_CACHE (a host HF cache holding
# VSNAP_MODEL at VSNAP_REVISION: snapshot create runs offline, HF_HUB_OFFLINE=1). Optional: VSNAP_BASE_IMAGE,
# VSNAP_MODEL, VSNAP_REVISION, VSNAP_OVERLAY, VSNAP_GPUS, VSNAP_PRIVILEGES, VSNAP_WORKERS (xdist workers; default
# 1, lanes one after another; 2 only on an agent with two GPUs: --vsnap-gpus=auto then gives each runner lane its
# own GPU, and the harness refuses -n 2 on one GPU), VSNAP_ANNOTATE=1 (Buildkite annotation; anything else: none),
# REPORT_DIR (default reports/nightly), VENV (default .venv-nightly). Every stop before the harness renders its
# report (model cache, setup, doctor, refused options) still leaves REPORT_DIR/summary.md and the annotation.
set -uo pipefail
cd "$(dirname "$0")/.."
: "${VSNAP_IMAGE:?set VSNAP_IMAGE to the nightly image tag}"
: "${VSNAP_MODEL_CACHE:?set VSNAP_MODEL_CACHE to a host HF cache holding the model (snapshot create runs offline)}"
export VSNAP_MODEL="${VSNAP_MODEL:-Qwen/Qwen3-0.6B}"
export VSNAP_REVISION="${VSNAP_REVISION:-c1899de289a04d12100db370d81485cdf75e47ca}"
export VSNAP_PRIVILEGES="${VSNAP_PRIVILEGES:-privileged}"
export VSNAP_MODEL_CACHE
REPORT_DIR="${REPORT_DIR:-reports/nightly}"
VENV="${VENV:-.venv-nightly}"
WORKERS="${VSNAP_WORKERS:-1}"
dry="${VSNAP_DRY_RUN:-0}"

show() { printf '+'; printf ' %q' "$@"; printf '\n'; }  # the command, shell-quoted (dry-run output)

run() {
  show "$@"
  if [ "$dry" != "1" ]; then "$@"; fi
}

# Written when the run stops before pytest renders a report, so CI always has a report and an annotation.
early_failure() {
  local why="$1" detail="$2"
  [ "$dry" = "1" ] && return 0
  mkdir -p "$REPORT_DIR"
  printf '## vsnap-qual: FAIL — %s\n\n```\n%s\n```\n' "$why" "$detail" >"$REPORT_DIR/summary.md"
  if [ "${VSNAP_ANNOTATE:-0}" = "1" ] && command -v buildkite-agent >/dev/null; then
    buildkite-agent annotate --style error --context vsnap-qual <"$REPORT_DIR/summary.md" || true
  fi
  if [ -n "${GITHUB_STEP_SUMMARY:-}" ]; then cat "$REPORT_DIR/summary.md" >>"$GITHUB_STEP_SUMMARY"; fi
}

if [ "$dry" != "1" ] && [ ! -d "$VSNAP_MODEL_CACHE" ]; then
  early_failure "model cache missing" "VSNAP_MODEL_CACHE=$VSNAP_MODEL_CACHE is not a directory"
  echo "nightly: VSNAP_MODEL_CACHE=$VSNAP_MODEL_CACHE is not a directory" >&2
  exit 1
fi
if [ "$dry" != "1" ] && [ -e "$REPORT_DIR" ]; then rm -rf "$REPORT_DIR"; fi  # a fresh report per build

# A private venv: never pip-install into the agent's system Python.
run python3 -m venv "$VENV" || { early_failure "setup" "python3 -m venv $VENV failed"; exit 1; }
run "$VENV/bin/python" -m pip install -q -e . || { early_failure "setup" "pip install -e . failed"; exit 1; }

# Pull before the doctor (it never pulls: a new nightly tag is not on this agent yet), as the harness's
# --vsnap-pull=auto would: an absent image, or a tag from a registry (:nightly moves); not an image built on this
# agent, not a digest already here. The suites then take the images as pulled here (--vsnap-pull=missing).
pull_if_needed() {
  local image="$1" digests
  if digests="$(docker image inspect --format '{{len .RepoDigests}}' "$image" 2>/dev/null)"; then
    case "$image" in
      *@sha256:*) echo "nightly: $image is pinned by digest and present: not pulled"; return 0 ;;
    esac
    if [ "$digests" = "0" ]; then echo "nightly: $image was built on this agent: not pulled"; return 0; fi
  fi
  run docker pull "$image"
}
for image in "$VSNAP_IMAGE" ${VSNAP_BASE_IMAGE:+"$VSNAP_BASE_IMAGE"}; do
  pull_if_needed "$image" || { early_failure "pull" "docker pull $image failed"; exit 1; }
done

doctor_log="$REPORT_DIR/doctor.txt"
if [ "$dry" != "1" ]; then mkdir -p "$REPORT_DIR"; fi
show "$VENV/bin/vsnap-qual" doctor
if [ "$dry" != "1" ]; then
  "$VENV/bin/vsnap-qual" doctor 2>&1 | tee "$doctor_log"
  doctor_status=${PIPESTATUS[0]}
  if [ "$doctor_status" -ne 0 ]; then
    early_failure "doctor found a required check failing" "$(cat "$doctor_log")"
    exit 1
  fi
fi

base_args=()
if [ -n "${VSNAP_BASE_IMAGE:-}" ]; then base_args=(--vsnap-base-image="$VSNAP_BASE_IMAGE"); fi
xdist_args=()
if [ "$WORKERS" -gt 1 ]; then xdist_args=(-n "$WORKERS"); fi
annotate_args=()
if [ "${VSNAP_ANNOTATE:-0}" = "1" ]; then annotate_args=(--vsnap-annotate); fi
# -c /dev/null: no repository ini at all (the suites' own holds no target, but the nightly job takes nothing
# from the checkout's configuration); the plugin keeps each runner's lanes on one worker itself
pytest_log="$REPORT_DIR/pytest.txt"
pytest_cmd=("$VENV/bin/python" -m pytest -c /dev/null -p vsnap_qual -p xdist "${xdist_args[@]}" --rootdir=. suites/
  --vsnap-report-dir="$REPORT_DIR" --junitxml="$REPORT_DIR/junit.xml" --vsnap-pull=missing "${base_args[@]}"
  "${annotate_args[@]}")
show "${pytest_cmd[@]}"
status=0
if [ "$dry" != "1" ]; then
  "${pytest_cmd[@]}" 2>&1 | tee "$pytest_log"
  status=${PIPESTATUS[0]}
fi
if [ "$status" -eq 5 ]; then echo "nightly: no tests ran" >&2; status=1; fi
if [ "$dry" != "1" ] && [ "$status" -ne 0 ] && [ ! -f "$REPORT_DIR/summary.md" ]; then
  # e.g. exit 4: the harness refused an option before anything started, and so rendered no report
  early_failure "pytest stopped before the report (exit $status)" "$(tail -n 40 "$pytest_log")"
fi
exit "$status"
