#!/usr/bin/env bash
# The qualification matrix on a Slurm cluster, from one command (issue 46, docs/scheduling.md): an sbatch job array
# of N tasks, one shard of the matrix each (the harness reads its K and N from SLURM_ARRAY_TASK_ID/COUNT/MIN), with
# --gres=gpu:G where the partition's nodes have GPUs, then a merge job that runs once every task has ended, failed
# or cancelled ones too (--dependency=afterany), and writes one report and one verdict.
#
# Usage: scripts/slurm/qualify.sh --shards N --out DIR [options] -- PYTEST-ARGUMENTS...
#   --shards N            how many shards (array tasks)
#   --out DIR             a directory every node sees: shard K writes DIR/shards/shard-K, the merge DIR/merged,
#                         the jobs' scripts and output DIR/jobs
#   --archive             no shared report directory: each shard also packs its report as DIR/shards/shard-K.tar.gz
#                         (one file to move), and the merge reads the archives
#   --gpus-per-shard G    --gres=gpu:G for each task (default: 1 where the partition's nodes have GPUs, else none)
#   --partition P         the partition (default: the cluster's default)
#   --job-name NAME       the jobs' name (default vsnap-qual; the merge job's is NAME-merge)
#   --python PY           the Python with vsnap-qual installed, on the nodes (default: .venv/bin/python here)
#   --time MINUTES        each task's time limit (default: the partition's)
#   --sbatch-arg ARG      one more sbatch argument for every job (repeatable: --account=..., --qos=...)
# PYTEST-ARGUMENTS are the qualification's own (suites/ and the --vsnap-* options, as for one machine); the report
# directory, JUnit file and shard are set here. Prints the two job ids (array=<id> merge=<id>) on its last line.
#
# A cancelled task (scancel) stops its shard as Ctrl-C does: the harness removes its lanes and records the
# interruption, and the merge names that shard's lanes INCOMPLETE. Slurm sends SIGKILL KillWait seconds after
# SIGTERM (30 by default): the lanes' removal must fit in it.
set -euo pipefail

die() {
  echo "slurm/qualify: $*" >&2
  exit 2
}

repo="$(cd "$(dirname "$0")/../.." && pwd)"
shards="" out="" archive=0 gpus="" partition="" name="vsnap-qual" python="$repo/.venv/bin/python" minutes=""
extra=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --shards) shards="${2:-}"; shift 2 ;;
    --shards=*) shards="${1#*=}"; shift ;;
    --out) out="${2:-}"; shift 2 ;;
    --out=*) out="${1#*=}"; shift ;;
    --archive) archive=1; shift ;;
    --gpus-per-shard) gpus="${2:-}"; shift 2 ;;
    --gpus-per-shard=*) gpus="${1#*=}"; shift ;;
    --partition) partition="${2:-}"; shift 2 ;;
    --partition=*) partition="${1#*=}"; shift ;;
    --job-name) name="${2:-}"; shift 2 ;;
    --job-name=*) name="${1#*=}"; shift ;;
    --python) python="${2:-}"; shift 2 ;;
    --python=*) python="${1#*=}"; shift ;;
    --time) minutes="${2:-}"; shift 2 ;;
    --time=*) minutes="${1#*=}"; shift ;;
    --sbatch-arg) extra+=("${2:-}"); shift 2 ;;
    --sbatch-arg=*) extra+=("${1#*=}"); shift ;;
    --) shift; break ;;
    *) die "unknown option $1 (the pytest arguments come after --)" ;;
  esac
done
[[ "$shards" =~ ^[1-9][0-9]*$ ]] || die "--shards N: a whole number >= 1 (got '${shards}')"
[[ -n "$out" ]] || die "--out DIR: a directory every node of the cluster sees"
[[ -z "$gpus" || "$gpus" =~ ^[0-9]+$ ]] || die "--gpus-per-shard G: a whole number (got '$gpus')"
[[ -z "$minutes" || "$minutes" =~ ^[1-9][0-9]*$ ]] || die "--time MINUTES: a whole number (got '$minutes')"
[[ -x "$python" ]] || die "--python $python is not an executable Python (make install makes .venv/bin/python)"
[[ $# -gt 0 ]] || die "no pytest arguments after --: give the qualification's (suites/ --vsnap-image=... ...)"
for arg in "$@"; do
  case "$arg" in
    --vsnap-shard=* | --vsnap-shard | --vsnap-shard-count* | --vsnap-report-dir* | --junitxml*)
      die "$arg is set by this script for each shard: leave it out" ;;
  esac
done
command -v sbatch >/dev/null || die "sbatch is not on PATH: run it where Slurm's clients are"
mkdir -p "$out/shards" "$out/jobs"
out="$(cd "$out" && pwd)"

part_args=()
[[ -z "$partition" ]] || part_args=(--partition="$partition")
if [[ -z "$gpus" ]]; then
  # the partition's nodes' generic resources (sinfo %G: "gpu:8", "gpu:a100:4(S:0-1)" or "(null)")
  if sinfo -h "${part_args[@]}" -o '%G' 2>/dev/null | grep -q 'gpu'; then gpus=1; else gpus=0; fi
fi
gres_args=()
[[ "$gpus" == 0 ]] || gres_args=(--gres="gpu:$gpus")
time_args=()
[[ -z "$minutes" ]] || time_args=(--time="$minutes")

quoted="$(printf ' %q' "$@")"
task="$out/jobs/shard.sbatch"
cat >"$task" <<EOF
#!/bin/bash
# One shard of the matrix (written by scripts/slurm/qualify.sh): K and N come from the array task's environment.
set -uo pipefail
cd $(printf '%q' "$repo")
k=\$((SLURM_ARRAY_TASK_ID - SLURM_ARRAY_TASK_MIN + 1))
report=$(printf '%q' "$out")/shards/shard-\$k
rm -rf "\$report" "\$report.tar.gz"  # a task run again starts from an empty report directory
# pytest in the background, so that this shell waits out its cleanup after scancel's SIGTERM (which Slurm sends to
# every process of the job: the harness takes it as an interrupt and removes its lanes)
$(printf '%q' "$python") -m pytest$quoted --vsnap-report-dir="\$report" --junitxml="\$report/junit.xml" &
pid=\$!
trap 'echo "shard \$k: SIGTERM, waiting for the harness to remove its lanes"' TERM
status=0
wait "\$pid" || status=\$?
while kill -0 "\$pid" 2>/dev/null; do wait "\$pid" || status=\$?; done
if [[ $archive == 1 && -d "\$report" ]]; then
  tar czf "\$report.tar.gz.part" -C "\$(dirname "\$report")" "shard-\$k" && mv "\$report.tar.gz.part" "\$report.tar.gz"
fi
exit "\$status"
EOF

merge="$out/jobs/merge.sbatch"
if [[ $archive == 1 ]]; then inputs='"$root"/shard-*.tar.gz'; else inputs='"$root"/shard-*/'; fi
cat >"$merge" <<EOF
#!/bin/bash
# One verdict from the shards (written by scripts/slurm/qualify.sh); a shard that left nothing is named missing.
set -uo pipefail
shopt -s nullglob
cd $(printf '%q' "$repo")
root=$(printf '%q' "$out")/shards
rm -rf $(printf '%q' "$out")/merged
exec $(printf '%q' "$python") -m vsnap_qual.cli merge $inputs --shards $shards --out $(printf '%q' "$out")/merged
EOF

array_id="$(sbatch --parsable --job-name="$name" "${part_args[@]}" "${gres_args[@]}" "${time_args[@]}" "${extra[@]}" \
  --array="0-$((shards - 1))" --chdir="$repo" --output="$out/jobs/%x-%A_%a.out" "$task")"
array_id="${array_id%%;*}"
merge_id="$(sbatch --parsable --job-name="$name-merge" "${part_args[@]}" "${extra[@]}" \
  --dependency="afterany:$array_id" --kill-on-invalid-dep=no --chdir="$repo" --output="$out/jobs/%x-%j.out" "$merge")"
merge_id="${merge_id%%;*}"
echo "slurm/qualify: $shards shards as array job $array_id (gres: ${gres_args[*]:-none}), merge job $merge_id" \
  "(after every task) into $out/merged" >&2
echo "array=$array_id merge=$merge_id"
