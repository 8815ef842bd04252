#!/usr/bin/env bash
# Nightly GPU qualification: resolve the newest nightly image, pull, doctor, then the suites against it with the
# released base image as the second arm. The one place the CI definitions' qualification is written: Buildkite
# (.buildkite/nightly.yml, .buildkite/qualify.yml), GitHub Actions (.github/workflows/nightly.yml) and the
# Kubernetes example (ci/k8s/qualify-indexed-job.yaml) all run this script, so every one runs the same pytest
# command line. Dry run (prints the commands, runs nothing): VSNAP_DRY_RUN=1.
#
# Usage: ci/nightly.sh [STAGE [SHARD-OPTION]]
#   run      (the default) one machine: resolve, then qualify the whole matrix here into REPORT_DIR, then record
#   resolve  resolve the image and hand it on: Buildkite meta-data (vsnap-image, vsnap-nightly-record) and an
#            upload of .buildkite/qualify.yml; GitHub job outputs (image, record, qualify=true|false)
#   shard    qualify one shard of the matrix into VSNAP_SHARD_ROOT/shard-K; SHARD-OPTION is --vsnap-shard=K/N or
#            --vsnap-shard-count=N (Kubernetes' JOB_COMPLETION_INDEX); none: K and N from the scheduler's
#            environment (Buildkite's parallel job, a Slurm array task), as the plugin reads them
#   merge    vsnap-qual merge every VSNAP_SHARD_ROOT/shard-* into REPORT_DIR (one verdict), annotate, record
#
# The image: VSNAP_IMAGE when given (a manual run: nothing resolved, nothing recorded); otherwise the newest tag of
# VSNAP_NIGHTLY_REPOSITORY (default vllm/vllm-openai) matching VSNAP_NIGHTLY_PATTERN (default nightly-*) by image
# creation time (`vsnap-qual nightly-tag`), qualified only when it differs from the last qualified tag recorded in
# VSNAP_NIGHTLY_STATE/last-qualified (a directory the CI keeps between builds; default .vsnap-nightly). A tag is
# recorded once a qualification reached a verdict (PASS, FAIL or PARTIAL); an INCOMPLETE or INTERRUPTED run, or
# one stopped before the harness, is tried again the next night. Every stop, a refusal included (nothing new since
# the last tag: exit 0; the registry unreadable: FAIL), leaves REPORT_DIR/summary.md and, with VSNAP_ANNOTATE=1,
# the Buildkite annotation; with GITHUB_STEP_SUMMARY, the GitHub step summary.
#
# Qualifying stages need VSNAP_MODEL_CACHE (a host HF cache holding VSNAP_MODEL at VSNAP_REVISION: snapshot create
# runs offline, HF_HUB_OFFLINE=1). Optional: VSNAP_BASE_IMAGE, VSNAP_MODEL, VSNAP_REVISION, VSNAP_OVERLAY,
# VSNAP_GPUS, VSNAP_PRIVILEGES, VSNAP_WORKERS (xdist workers; default 1, lanes one after another; 2 only on an agent
# with two GPUs: --vsnap-gpus=auto then gives each runner lane its own GPU, and the harness refuses -n 2 on one
# GPU), VSNAP_ANNOTATE=1 (Buildkite annotation; anything else: none), REPORT_DIR (default reports/nightly),
# VSNAP_SHARD_ROOT (default reports/shards), VENV (default .venv-nightly), VSNAP_NIGHTLY_RECORD (merge: the
# TAG@DIGEST to record; default the Buildkite meta-data), VSNAP_HISTORY_GATE=1 (the history gate fails the build:
# keep_history below).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
stage="${1:-run}"
shift || true
export VSNAP_MODEL="${VSNAP_MODEL:-Qwen/Qwen3-0.6B}"
export VSNAP_REVISION="${VSNAP_REVISION:-c1899de289a04d12100db370d81485cdf75e47ca}"
export VSNAP_PRIVILEGES="${VSNAP_PRIVILEGES:-privileged}"
REPORT_DIR="${REPORT_DIR:-reports/nightly}"
SHARD_ROOT="${VSNAP_SHARD_ROOT:-reports/shards}"
STATE="${VSNAP_NIGHTLY_STATE:-.vsnap-nightly}"
REPOSITORY="${VSNAP_NIGHTLY_REPOSITORY:-vllm/vllm-openai}"
PATTERN="${VSNAP_NIGHTLY_PATTERN:-nightly-*}"
VENV="${VENV:-.venv-nightly}"
WORKERS="${VSNAP_WORKERS:-1}"
dry="${VSNAP_DRY_RUN:-0}"

show() { printf '+'; printf ' %q' "$@"; printf '\n'; }  # the command, shell-quoted (dry-run output)

run() {
  show "$@"
  if [ "$dry" != "1" ]; then "$@"; fi
}

on_buildkite() { [ "${BUILDKITE:-}" = "true" ] && command -v buildkite-agent >/dev/null; }

# The summary file goes to the Buildkite annotation (VSNAP_ANNOTATE=1) and the GitHub step summary.
publish() {
  local style="$1" file="$2"
  if [ "${VSNAP_ANNOTATE:-0}" = "1" ] && command -v buildkite-agent >/dev/null; then
    buildkite-agent annotate --style "$style" --context vsnap-qual <"$file" || true
  fi
  if [ -n "${GITHUB_STEP_SUMMARY:-}" ]; then cat "$file" >>"$GITHUB_STEP_SUMMARY"; fi
}

# Written when the run stops before pytest renders a report, so CI always has a report and an annotation.
early_failure() {
  local why="$1" detail="$2"
  [ "$dry" = "1" ] && return 0
  mkdir -p "$REPORT_DIR"
  printf '## vsnap-qual: FAIL — %s\n\n```\n%s\n```\n' "$why" "$detail" >"$REPORT_DIR/summary.md"
  publish error "$REPORT_DIR/summary.md"
}

# The shard's number K (1-based) from its option or the scheduler's environment, as the plugin reads them; empty
# for an unsharded run.
shard_number() {
  local option="${1:-}"
  case "$option" in
    --vsnap-shard=*/*) option="${option#--vsnap-shard=}"; echo "${option%/*}"; return ;;
  esac
  if [ -n "${JOB_COMPLETION_INDEX:-}" ]; then echo $((JOB_COMPLETION_INDEX + 1)); return; fi
  if [ -n "${BUILDKITE_PARALLEL_JOB:-}" ]; then echo $((BUILDKITE_PARALLEL_JOB + 1)); return; fi
  if [ -n "${SLURM_ARRAY_TASK_ID:-}" ]; then
    echo $((SLURM_ARRAY_TASK_ID - ${SLURM_ARRAY_TASK_MIN:-0} + 1))
    return
  fi
}

shard_args=()
case "$stage" in
  run | resolve | merge)
    if [ $# -gt 0 ]; then echo "nightly: $stage takes no arguments (got: $*)" >&2; exit 2; fi ;;
  shard)
    if [ $# -gt 1 ]; then echo "nightly: shard takes at most one option (got: $*)" >&2; exit 2; fi
    case "${1:-}" in
      "") ;;
      --vsnap-shard=[0-9]*/[0-9]* | --vsnap-shard-count=[0-9]*) shard_args=("$1") ;;
      *) echo "nightly: shard takes --vsnap-shard=K/N or --vsnap-shard-count=N, not $1" >&2; exit 2 ;;
    esac
    k="$(shard_number "${1:-}")"
    if [ -z "$k" ]; then
      echo "nightly: shard: no shard given (--vsnap-shard=K/N) and no scheduler's shard in the environment" >&2
      exit 2
    fi
    REPORT_DIR="$SHARD_ROOT/shard-$k" ;;
  *)
    echo "nightly: unknown stage $stage (run, resolve, shard or merge)" >&2
    exit 2 ;;
esac

if [ "$stage" = run ] || [ "$stage" = shard ]; then
  : "${VSNAP_MODEL_CACHE:?set VSNAP_MODEL_CACHE to a host HF cache holding the model (snapshot create runs offline)}"
  export VSNAP_MODEL_CACHE
  if [ "$dry" != "1" ] && [ ! -d "$VSNAP_MODEL_CACHE" ]; then
    early_failure "model cache missing" "VSNAP_MODEL_CACHE=$VSNAP_MODEL_CACHE is not a directory"
    echo "nightly: VSNAP_MODEL_CACHE=$VSNAP_MODEL_CACHE is not a directory" >&2
    exit 1
  fi
fi
if [ "$dry" != "1" ] && [ -e "$REPORT_DIR" ]; then rm -rf "$REPORT_DIR"; fi  # a fresh report per build

# A private venv: never pip-install into the agent's system Python.
run python3 -m venv "$VENV" || { early_failure "setup" "python3 -m venv $VENV failed"; exit 1; }
run "$VENV/bin/python" -m pip install -q -e . || { early_failure "setup" "pip install -e . failed"; exit 1; }

# --- the image ------------------------------------------------------------------------------------------------
record="${VSNAP_NIGHTLY_RECORD:-}"
resolve_image() {
  local out err status key value new="" last="" tag=""
  err="$(mktemp)"
  show "$VENV/bin/vsnap-qual" nightly-tag "$REPOSITORY" --pattern "$PATTERN" --last-file "$STATE/last-qualified" \
    --cache "$STATE/created-cache.json"
  [ "$dry" = "1" ] && { rm -f "$err"; VSNAP_IMAGE="$REPOSITORY:<newest $PATTERN>"; return 0; }
  out="$("$VENV/bin/vsnap-qual" nightly-tag "$REPOSITORY" --pattern "$PATTERN" --last-file "$STATE/last-qualified" \
    --cache "$STATE/created-cache.json" 2>"$err")"
  status=$?
  cat "$err" >&2
  if [ "$status" -ne 0 ]; then
    # no tag resolved: the registry answered with no matching tag, or could not be read; either way a FAIL summary
    if grep -q "error: no tag of " "$err"; then
      early_failure "no tag of $REPOSITORY matches $PATTERN: nothing to qualify" "$(cat "$err")"
    else
      early_failure "the registry could not be read for the newest $PATTERN tag of $REPOSITORY" "$(cat "$err")"
    fi
    rm -f "$err"
    return 1
  fi
  rm -f "$err"
  while IFS='=' read -r key value; do
    case "$key" in
      image) VSNAP_IMAGE="$value" ;; record) record="$value" ;; new) new="$value" ;; last) last="$value" ;;
      tag) tag="$value" ;;
    esac
  done <<<"$out"
  if [ "$new" != "true" ]; then
    mkdir -p "$REPORT_DIR"
    printf '## vsnap-qual: nothing new since %s (%s, the newest %s tag of %s, was qualified already)\n' \
      "${last%%@*}" "$tag" "$PATTERN" "$REPOSITORY" >"$REPORT_DIR/summary.md"
    cat "$REPORT_DIR/summary.md"
    publish info "$REPORT_DIR/summary.md"
    return 2
  fi
  echo "nightly: qualifying $VSNAP_IMAGE (new since ${last:-no recorded tag})"
}

# The tag is recorded only for a qualification that reached a verdict; the statuses that mean one are the
# caller's (pytest: 0 PASS, 1 FAIL or PARTIAL; vsnap-qual merge, as report: 0, 1, 3 PARTIAL). Anything else
# (INCOMPLETE, INTERRUPTED, a stop before the harness) is tried again the next night.
record_qualified() {
  local status="$1" verdicts="$2"
  [ -n "$record" ] || return 0
  case " $verdicts " in
    *" $status "*) ;;
    *) echo "nightly: not recording ${record%%@*}: no verdict reached (exit $status), tried again next time"; return 0 ;;
  esac
  echo "nightly: recording $record in $STATE/last-qualified"
  [ "$dry" = "1" ] && return 0
  mkdir -p "$STATE" && printf '%s\n' "$record" >"$STATE/last-qualified"
}

if { [ "$stage" = resolve ] || [ "$stage" = run ]; } && [ -z "${VSNAP_IMAGE:-}" ]; then
  resolve_image
  case $? in
    0) ;;
    2) if [ -n "${GITHUB_OUTPUT:-}" ]; then echo "qualify=false" >>"$GITHUB_OUTPUT"; fi; exit 0 ;;
    *) if [ -n "${GITHUB_OUTPUT:-}" ]; then echo "qualify=false" >>"$GITHUB_OUTPUT"; fi; exit 1 ;;
  esac
fi
if [ "$stage" = resolve ]; then
  if [ -n "${VSNAP_IMAGE:-}" ] && [ -z "$record" ]; then echo "nightly: qualifying $VSNAP_IMAGE (given)"; fi
  if [ -n "${GITHUB_OUTPUT:-}" ]; then
    printf 'image=%s\nrecord=%s\nqualify=true\n' "$VSNAP_IMAGE" "$record" >>"$GITHUB_OUTPUT"
  fi
  if on_buildkite; then
    run buildkite-agent meta-data set vsnap-image "$VSNAP_IMAGE"
    if [ -n "$record" ]; then run buildkite-agent meta-data set vsnap-nightly-record "$record"; fi
    run buildkite-agent pipeline upload .buildkite/qualify.yml
  fi
  exit 0
fi

# The history the CI keeps between builds: VSNAP_NIGHTLY_STATE/history, one folder a night that reached a
# results.json (its results.json), rendered each night into REPORT_DIR/history (history.html, history.md:
# `vsnap-qual history`) with its gate: the night's figures against the median of the last 7 compatible passed
# nights. A gate failure is said; with VSNAP_HISTORY_GATE=1 it also fails a build that passed (exit 1).
keep_history() {
  local status="$1" night
  [ -f "$REPORT_DIR/results.json" ] || { echo "$status"; return; }
  night="$STATE/history/$(date -u +%Y%m%dT%H%M%SZ)-$$"
  mkdir -p "$night" && cp "$REPORT_DIR/results.json" "$night/results.json"
  show "$VENV/bin/vsnap-qual" history "$STATE/history" --out "$REPORT_DIR/history" --gate >&2
  "$VENV/bin/vsnap-qual" history "$STATE/history" --out "$REPORT_DIR/history" --gate >&2
  case $? in
    0) ;;
    1) printf '\n_History gate: a figure is worse than the median of the last compatible passed nights; see history/history.md._\n' \
         >>"$REPORT_DIR/summary.md"
       if [ "${VSNAP_HISTORY_GATE:-0}" = "1" ] && [ "$status" -eq 0 ]; then status=1; fi ;;
    *) echo "nightly: vsnap-qual history could not render $STATE/history" >&2 ;;
  esac
  echo "$status"
}

# --- merge ----------------------------------------------------------------------------------------------------
if [ "$stage" = merge ]; then
  if [ -z "$record" ] && on_buildkite; then record="$(buildkite-agent meta-data get vsnap-nightly-record --default '')"; fi
  shards=()
  for dir in "$SHARD_ROOT"/shard-*; do [ -d "$dir" ] && shards+=("$dir"); done
  if [ "${#shards[@]}" -eq 0 ] && [ "$dry" = "1" ]; then shards=("$SHARD_ROOT/shard-*"); fi
  if [ "${#shards[@]}" -eq 0 ]; then
    mkdir -p "$REPORT_DIR"
    printf '## vsnap-qual: INCOMPLETE — no shard left a report in %s\n' "$SHARD_ROOT" >"$REPORT_DIR/summary.md"
    publish error "$REPORT_DIR/summary.md"
    exit 4
  fi
  merge_log="$REPORT_DIR/merge.txt"
  show "$VENV/bin/vsnap-qual" merge "${shards[@]}" --out "$REPORT_DIR"
  [ "$dry" = "1" ] && exit 0
  mkdir -p "$REPORT_DIR"
  "$VENV/bin/vsnap-qual" merge "${shards[@]}" --out "$REPORT_DIR" 2>&1 | tee "$merge_log"
  status=${PIPESTATUS[0]}
  if [ ! -f "$REPORT_DIR/summary.md" ]; then
    printf '## vsnap-qual: FAIL — vsnap-qual merge wrote no summary (exit %s)\n\n```\n%s\n```\n' \
      "$status" "$(tail -n 40 "$merge_log")" >"$REPORT_DIR/summary.md"
    [ "$status" -eq 0 ] && status=1
  fi
  # A shard that stopped before the harness rendered its report left only its own summary.md: its words go under
  # the merged verdict (which names its lanes as missing).
  for dir in "${shards[@]}"; do
    if [ -f "$dir/summary.md" ] && [ ! -f "$dir/evidence.jsonl" ] && [ ! -f "$dir/results.json" ]; then
      { printf '\n### %s stopped before the harness\n\n' "$(basename "$dir")"; sed 's/^## /#### /' "$dir/summary.md"; } \
        >>"$REPORT_DIR/summary.md"
    fi
  done
  gated="$(keep_history "$status")"
  case "$status" in 0) style=success ;; 3) style=warning ;; *) style=error ;; esac
  publish "$style" "$REPORT_DIR/summary.md"
  record_qualified "$status" "0 1 3"
  exit "$gated"
fi

# --- run / shard: qualify -------------------------------------------------------------------------------------
if [ -z "${VSNAP_IMAGE:-}" ] && on_buildkite; then VSNAP_IMAGE="$(buildkite-agent meta-data get vsnap-image --default '')"; fi
if [ -z "${VSNAP_IMAGE:-}" ]; then
  early_failure "no image" "VSNAP_IMAGE is not set and no resolve step handed one on"
  echo "nightly: set VSNAP_IMAGE, or run the resolve stage first" >&2
  exit 1
fi
export VSNAP_IMAGE

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
# A shard never annotates: the merge step annotates the one verdict.
if [ "${VSNAP_ANNOTATE:-0}" = "1" ] && [ "$stage" = run ]; then annotate_args=(--vsnap-annotate); fi
# The qualification's one command line, for every CI definition, and the README's and the GPU guide's: `python -m
# pytest suites/` with the suites' own ini (suites/pytest.ini: the plugin and xdist, no target, no tuning; the target
# comes from the VSNAP_* variables); the plugin keeps each runner's lanes on one worker itself.
# The plan line's estimate (--vsnap-plan-history, through its variable: the command line stays the one above) from
# the nights kept in VSNAP_NIGHTLY_STATE/history (keep_history): "no estimate: no previous run" the first night,
# the step medians of the last compatible nights from the second on.
export VSNAP_PLAN_HISTORY="${VSNAP_PLAN_HISTORY:-$STATE/history}"
if [ "$dry" != "1" ]; then mkdir -p "$VSNAP_PLAN_HISTORY"; fi
pytest_log="$REPORT_DIR/pytest.txt"
pytest_cmd=("$VENV/bin/python" -m pytest suites/ "${xdist_args[@]}" --vsnap-report-dir="$REPORT_DIR"
  --junitxml="$REPORT_DIR/junit.xml" --vsnap-pull=missing "${base_args[@]}" "${annotate_args[@]}" "${shard_args[@]}")
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
  exit "$status"
fi
if [ "$stage" = run ]; then
  record_qualified "$status" "0 1"
  if [ "$dry" != "1" ]; then status="$(keep_history "$status")"; fi
fi
exit "$status"
