#!/bin/sh
# Install the reference engine into the image being built (shared by Dockerfile and Dockerfile.pull).
# Usage: install_image.sh SRC FLAVOUR HF_HOME MODEL_ID MODEL_REVISION
set -eu
src=$1 flavour=$2 hf_home=$3 model_id=$4 revision=$5
site=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
case "$site" in /usr/lib/python3*) site=/usr/local/lib/python3.11/dist-packages ;; esac
python3 "$src/tools/install_engine.py" "$src/engine" "$flavour" "$site" /usr/local/bin
install -m 0755 "$src/tools/standins/criu.py" /usr/local/sbin/criu
install -m 0755 "$src/tools/standins/cuda_checkpoint.py" /usr/local/sbin/cuda-checkpoint
install -m 0755 "$src/tools/standins/nvidia_smi.py" /usr/local/bin/nvidia-smi
sed -i "1s|.*|#!$(command -v python3)|" /usr/local/sbin/criu /usr/local/sbin/cuda-checkpoint /usr/local/bin/nvidia-smi
mkdir -p /usr/local/lib/criu /etc/vsnap-reference
printf 'vsnap reference stand-in for the CRIU CUDA plugin (cuda_plugin.so); hashed into the identity\n' \
  > /usr/local/lib/criu/cuda_plugin.so
install -m 0644 "$src/config/gpu.json" /etc/vsnap-reference/gpu.json
# A fixed machine-id: the snapshot identity's host_id (the image, not the Docker host, is the "host" here).
printf '7673617072656600766e736170726566\n' > /etc/machine-id
python3 "$src/tools/make_model.py" "$hf_home" "$model_id" "$revision"
python3 -m compileall -q "$site/vllm"
