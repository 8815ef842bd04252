#!/bin/sh
# Install the reference engine into the image being built (shared by Dockerfile and Dockerfile.pull).
# Usage: install_image.sh SRC FLAVOUR HF_HOME MODEL_ID MODEL_REVISION
# CRIU, its CUDA plugin and cuda-checkpoint are not installed here: they come from the criu kit
# (/opt/vsnap-criu, see the Dockerfile). Only the GPU is simulated, and only where the host provides none.
set -eu
src=$1 flavour=$2 hf_home=$3 model_id=$4 revision=$5
site=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
pyver=$(python3 -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
case "$site" in /usr/lib/python3*) site=/usr/local/lib/python$pyver/dist-packages ;; esac
python3 "$src/tools/install_engine.py" "$src/engine" "$flavour" "$site" /usr/local/bin
# The simulated nvidia-smi sits at the END of PATH (/opt/vsnap/sim/bin): a host that provides the real one
# (the NVIDIA container runtime mounts /usr/bin/nvidia-smi) shadows it.
mkdir -p /opt/vsnap/sim/bin /etc/vsnap-reference
install -m 0755 "$src/tools/standins/nvidia_smi.py" /opt/vsnap/sim/bin/nvidia-smi
sed -i "1s|.*|#!$(command -v python3)|" /opt/vsnap/sim/bin/nvidia-smi
install -m 0644 "$src/config/gpu.json" /etc/vsnap-reference/gpu.json
# A fixed machine-id: the snapshot identity's host_id (the image, not the Docker host, is the "host" here).
printf '7673617072656600766e736170726566\n' > /etc/machine-id
python3 "$src/tools/make_model.py" "$hf_home" "$model_id" "$revision"
# A LoRA adapter for the model, generated here (never downloaded): --lora-modules tiny-lora=/opt/vsnap/adapters/tiny-lora
snapshot="$hf_home/hub/models--$(echo "$model_id" | sed 's|/|--|g')/snapshots/$revision"
python3 "$src/tools/make_lora.py" "$snapshot/config.json" /opt/vsnap/adapters/tiny-lora "$model_id"
python3 -m compileall -q "$site/vllm"
