#!/usr/bin/env bash
# The GPU tier: a full qualification (both runners, head and base, lifecycle and injected failures) of the
# reference engine on this machine's GPU with the host runtime (no Docker): real CRIU 4.2.1 with CRIU's own CUDA
# plugin and our cuda-checkpoint (the criu kit), real CUDA in the engine. For a bare GPU host with root, an NVIDIA
# driver and a Python with CUDA torch, pytest and requests, and no network (the lent H200): everything else comes
# from CARRY, made on a machine with Docker and a network by `scripts/gpu-tier.sh --prepare CARRY`.
#
#   scripts/gpu-tier.sh --prepare CARRY     # here: the criu kit tarball (the host runtime needs no docker SDK)
#   scripts/gpu-tier.sh CARRY OUT [pytest args...]    # there: installs into a scratch prefix, qualifies -> OUT/
#
# Env: PYTHON (default python3), PREFIX (default /tmp/vsnap-gpu-tier), VSNAP_GPU_TIER_RUNNERS (default v1,v2),
# VSNAP_GPU_MEMORY_UTILIZATION (default 0.05: the KV pool of a tiny model need not fill an H200).
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
log() { echo "gpu-tier: $*" >&2; }

if [ "${1:-}" = "--prepare" ]; then
  carry=${2:?usage: gpu-tier.sh --prepare CARRY}
  mkdir -p "$carry"
  bash "$here/docker/criu/export.sh" "$carry" || exit 1
  du -sh "$carry"
  exit 0
fi

carry=${1:?usage: gpu-tier.sh CARRY OUT [pytest args...]}
out=${2:?usage: gpu-tier.sh CARRY OUT [pytest args...]}
shift 2
carry="$(cd "$carry" && pwd)"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
python=${PYTHON:-python3}
prefix=${PREFIX:-/tmp/vsnap-gpu-tier}
runners=${VSNAP_GPU_TIER_RUNNERS:-v1,v2}
util=${VSNAP_GPU_MEMORY_UTILIZATION:-0.05}

[ "$(id -u)" = 0 ] || { log "needs root (CRIU, mount namespaces)"; exit 2; }
if [ "$(cat /proc/sys/kernel/io_uring_disabled 2>/dev/null || echo 2)" != 2 ]; then
  log "setting kernel.io_uring_disabled=2 (was $(cat /proc/sys/kernel/io_uring_disabled)): CRIU needs it"
  echo 2 >/proc/sys/kernel/io_uring_disabled || exit 2
fi
if [ -f "$here/COMMIT" ]; then  # an exported tree (git archive) names its commit in COMMIT
  commit="$(cat "$here/COMMIT") (exported tree)"
else
  commit="$(git -C "$here" rev-parse HEAD 2>/dev/null || echo unknown)$(git -C "$here" diff --quiet 2>/dev/null || echo ' (dirty)')"
fi
rm -rf "$prefix"
mkdir -p "$prefix/site" "$prefix/src"
# Run from a copy in the prefix, never from the checkout itself: that can be replaced while the tier runs (the
# device tool re-sends the working tree with each call; a CI job's checkout can be updated under it). Before the
# lanes bound the session's probe copy and ran in /, a fresh engine in a lane started before the replacement found
# an empty probe and a deleted working directory (oneMKL: "Cannot load .../libtorch_cpu.so"; evidence/gpu/); the
# harness's own modules, imported as the run goes, still must not change under it.
tar -C "$here" --exclude=./.git --exclude=./build --exclude=./.venv --exclude=./reports --exclude='*/__pycache__' \
  --exclude=./.mypy_cache --exclude=./.ruff_cache --exclude=./.pytest_cache -cf - . | tar -C "$prefix/src" -xf - ||
  { log "cannot copy $here to $prefix/src"; exit 2; }
here="$prefix/src"
cd "$here" || exit 2
tar -C "$prefix" -xzf "$carry/vsnap-criu-kit.tar.gz" || { log "no criu kit in $carry"; exit 2; }
# No docker SDK here: the host runtime never imports it (vsnap_qual/runtimes/; tests/seam checks sys.modules).
options="$(bash "$here/scripts/host-reference.sh" "$python" "$prefix/ref")" || exit 2

export PATH="$prefix/vsnap-criu/sbin:$prefix/vsnap-criu/bin:$PATH:$prefix/ref/sim/bin"
export CRIU_CUDA_PLUGIN_DIR="$prefix/vsnap-criu/lib/criu"
export PYTHONPATH="$here"  # the harness (the copy); lanes drop it
{
  echo "date: $(date -u +%FT%TZ)"
  echo "commit: $commit"
  echo "kernel: $(uname -r)"
  nvidia-smi --query-gpu=name,uuid,driver_version,memory.total --format=csv,noheader 2>&1 | sed 's/^/gpu: /'
  echo "criu: $(criu --version | head -1)"
  "$python" -c 'import sys, torch; print("python:", sys.version.split()[0], "torch:", torch.__version__, "cuda:", torch.version.cuda, torch.cuda.is_available())'
} | tee "$out/host.txt"

# the plugin by its entry point where vsnap-qual is installed, else by its module (nothing installed: bare host)
plugin=vsnap_qual.plugin
if "$python" -c 'import importlib.metadata as m, sys; sys.exit(not any(e.name == "vsnap_qual" for e in m.entry_points(group="pytest11")))' 2>/dev/null; then
  plugin=vsnap_qual
fi
start=$(date +%s)
# -c /dev/null: none of the checkout's ini defaults; the reference engine's settings are passed here explicitly
# (its fault timeout of 20 s keeps the fault suite short; a real engine keeps the 300 s default)
# shellcheck disable=SC2086
"$python" -m pytest -c /dev/null -p "$plugin" -p no:cacheprovider --rootdir="$here" --confcutdir="$here" \
  "$here/suites/" $options \
  --vsnap-runners="$runners" --vsnap-gpu-memory-utilization="$util" --vsnap-fault-timeout=20 \
  --vsnap-report-dir="$out/report" --junitxml="$out/report/junit.xml" -q "$@" 2>&1 | tee "$out/pytest.log" | grep -v "pid=" | tail -40
status=${PIPESTATUS[0]}
echo "wall_s: $(( $(date +%s) - start ))" | tee -a "$out/host.txt"
nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader >"$out/gpu-after.txt" 2>&1
echo "compute apps after the run: $(wc -l <"$out/gpu-after.txt")" | tee -a "$out/host.txt"
[ "$status" = 5 ] && status=1
exit "$status"
