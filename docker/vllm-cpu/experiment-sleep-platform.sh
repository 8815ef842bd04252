#!/usr/bin/env bash
# EXPERIMENT ONLY: build vsnap-vllm-cpu:0.32.0-sleep-platform = vsnap-vllm-cpu:0.32.0 + vsnap_qual/smoke (the CPU smoke platform)
# installed as a vLLM platform plugin (vLLM's CpuPlatform with is_sleep_mode_available() -> True; no vLLM file
# changed). Real vLLM 0.32.0 stops `vllm snapshot create` on a CPU at vllm/config/model.py:657 ("Sleep mode is not
# supported on current platform."); this image lets the harness see what the rest of real vLLM's lifecycle does.
# It is never a qualification target: its labels say so, and docs/real-vllm-differences.md reports it as such.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
src="$here/../../vsnap_qual/smoke"
version="${1:-${VSNAP_VLLM_VERSION:-0.32.0}}"
base="${VSNAP_VLLM_CPU_IMAGE:-vsnap-vllm-cpu:$version}"
image="${base}-sleep-platform"
bash "$here/build.sh" "$version" >&2
base_id="$(docker image inspect --format '{{.Id}}' "$base")"
hash="$( { echo "$base_id"; cat "$0" "$src"/vsnap_cpu_sleep.py "$src"/vsnap_cpu_sleep-1.dist-info/*; } | sha256sum | cut -c1-64)"
if [[ "${VSNAP_FORCE:-0}" != 1 && "$(docker image inspect --format '{{ index .Config.Labels "ai.vsnap.content-hash" }}' "$image" 2>/dev/null || true)" == "$hash" ]]; then
  echo "vllm-cpu-experiment: $image is up to date" >&2
  exit 0
fi
ctx="$(mktemp -d)"
trap 'rm -rf "$ctx"' EXIT
cp -r "$src"/vsnap_cpu_sleep.py "$src"/vsnap_cpu_sleep-1.dist-info "$ctx/"
cat >"$ctx/Dockerfile" <<DOCKERFILE
FROM $base
COPY vsnap_cpu_sleep.py /opt/vllm/lib/python3.11/site-packages/vsnap_cpu_sleep.py
COPY vsnap_cpu_sleep-1.dist-info /opt/vllm/lib/python3.11/site-packages/vsnap_cpu_sleep-1.dist-info
DOCKERFILE
DOCKER_BUILDKIT=0 docker build -q \
  --label "ai.vsnap.content-hash=$hash" \
  --label "ai.vsnap.experiment=NOT A QUALIFICATION TARGET: vLLM platform plugin vsnap_cpu_sleep admits --enable-sleep-mode on CPU (vllm/config/model.py:657 refuses it)" \
  --label "ai.vsnap.simulated=nvidia-smi: GPU identity shim; plus the vsnap_cpu_sleep platform plugin (experiment)" \
  -t "$image" "$ctx" >&2
echo "vllm-cpu-experiment: built $image" >&2
