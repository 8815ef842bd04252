#!/usr/bin/env bash
# Install the reference engine on this host (no Docker), for the host runtime (--vsnap-runtime=host):
# PREFIX/head and PREFIX/base are Python environments of PYTHON (a venv each, seeing PYTHON's own packages
# such as torch through a .pth file) with the head / base flavour of the reference `vllm` installed, and
# PREFIX/hf holds the tiny model at its pinned revision. Where the host has no nvidia-smi, the simulated one
# (the only simulated part, as in the reference image) goes to PREFIX/sim/bin: put it LAST on PATH. PREFIX/adapters/tiny-lora
# is the LoRA adapter the reference image generates at build (docker/reference/tools/make_lora.py).
# Usage: scripts/host-reference.sh PYTHON PREFIX        Prints the harness options to use.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python=${1:?usage: host-reference.sh PYTHON PREFIX}
prefix=${2:?usage: host-reference.sh PYTHON PREFIX}
model=vsnap/tiny-qwen3
revision=7f3a9c2e5b1d4086a2e4c6b8d0f1a3c5e7092b4d
engine="$here/docker/reference/engine"
log() { echo "host-reference: $*" >&2; }

"$python" -c 'import torch' 2>/dev/null || { log "$python cannot import torch (the engine needs it)"; exit 2; }
torch_site="$("$python" -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')"
mkdir -p "$prefix"
for flavour in head base; do
  env_dir="$prefix/$flavour"
  rm -rf "$env_dir"
  "$python" -m venv --without-pip "$env_dir"
  site="$("$env_dir/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  printf '%s\n' "$torch_site" >"$site/_vsnap_host_torch.pth"
  "$env_dir/bin/python" "$here/docker/reference/tools/install_engine.py" "$engine" "$flavour" "$site" "$env_dir/bin" \
    >/dev/null
  "$env_dir/bin/python" -m compileall -q "$site/vllm"
  log "$flavour: $("$env_dir/bin/vllm" --version 2>/dev/null | tail -1) in $env_dir"
done
PYTHONPATH="" "$prefix/head/bin/python" "$here/docker/reference/tools/make_model.py" "$prefix/hf" "$model" "$revision" \
  >/dev/null
# the LoRA adapter of issue 28's variant, as the reference image has it (--lora-modules tiny-lora=PREFIX/adapters/tiny-lora)
PYTHONPATH="" "$prefix/head/bin/python" "$here/docker/reference/tools/make_lora.py" \
  "$prefix/hf/hub/models--${model/\//--}/snapshots/$revision/config.json" "$prefix/adapters/tiny-lora" "$model" >/dev/null
log "LoRA adapter: --lora-modules tiny-lora=$prefix/adapters/tiny-lora"
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  log "real nvidia-smi found: $(nvidia-smi -L | head -1)"
else
  mkdir -p "$prefix/sim/bin" /etc/vsnap-reference
  sed "1s|.*|#!$prefix/head/bin/python|" "$here/docker/reference/tools/standins/nvidia_smi.py" >"$prefix/sim/bin/nvidia-smi"
  chmod 0755 "$prefix/sim/bin/nvidia-smi"
  [ -f /etc/vsnap-reference/gpu.json ] || install -m 0644 "$here/docker/reference/config/gpu.json" /etc/vsnap-reference/gpu.json
  log "no GPU: simulated nvidia-smi in $prefix/sim/bin (put it last on PATH)"
fi
[ -f /etc/machine-id ] || log "warning: /etc/machine-id missing (the snapshot identity's host_id)"
echo "--vsnap-runtime=host --vsnap-python=$prefix/head/bin/python --vsnap-base-python=$prefix/base/bin/python" \
  "--vsnap-model=$model --vsnap-revision=$revision --vsnap-model-cache=$prefix/hf"
