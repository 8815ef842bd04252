#!/bin/bash
# GPU check of the reference engine (CUDA path): install into a prefix, serve, sleep/wake, completions.
set -u
R=7f3a9c2e5b1d4086a2e4c6b8d0f1a3c5e7092b4d
P=/tmp/vref; mkdir -p $P/site $P/bin
nvidia-smi -L; python3 -V
python3 -c "import torch;print('torch', torch.__version__, torch.cuda.is_available())" || exit 3
python3 docker/reference/tools/install_engine.py docker/reference/engine head $P/site $P/bin
export PYTHONPATH=$P/site HF_HOME=$P/hf HF_HUB_OFFLINE=1 VLLM_SERVER_DEV_MODE=1 OMP_NUM_THREADS=1
python3 docker/reference/tools/make_model.py $HF_HOME vsnap/tiny-qwen3 $R || exit 4
$P/bin/vllm serve vsnap/tiny-qwen3 --revision $R --dtype float16 --max-model-len 512 --gpu-memory-utilization 0.02 --enable-sleep-mode --host 127.0.0.1 --port 18000 > $OUT/serve.log 2>&1 &
SP=$!
for i in $(seq 200); do curl -sf localhost:18000/health >/dev/null && break; sleep 0.2; done
C='{"model":"vsnap/tiny-qwen3","prompt":"The capital of France is","max_tokens":1,"min_tokens":1,"temperature":0,"logprobs":0}'
echo "completion1: $(curl -s localhost:18000/v1/completions -H 'Content-Type: application/json' -d "$C")"
nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader
curl -s -X POST 'localhost:18000/sleep?level=2'; echo " slept: $(curl -s localhost:18000/is_sleeping)"
nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader
curl -s -X POST 'localhost:18000/wake_up?tags=weights'; curl -s -X POST localhost:18000/collective_rpc -H 'Content-Type: application/json' -d '{"method":"reload_weights"}'; curl -s -X POST 'localhost:18000/wake_up?tags=kv_cache'
nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader
echo "completion2: $(curl -s localhost:18000/v1/completions -H 'Content-Type: application/json' -d "$C")"
kill $SP; sleep 2; grep -E "Worker device|KV cache size|Sleep mode|Error|Traceback" $OUT/serve.log | head -20
