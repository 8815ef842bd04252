#!/bin/sh
# inside vsnap-vllm-cpu:0.32.0: create, restore, ask, kill, restore again; print the serving counters at each step
set -u
R=b04193068dc9e2d037b36de7fec6ef00cdea53c5
export PYTHONPATH=/vsnap/smoke VLLM_USE_V2_MODEL_RUNNER=0 VLLM_SERVER_DEV_MODE=1
mkdir -p -m 0700 /work
counters() {
  echo "-- counters: $1"
  curl -s http://127.0.0.1:8400/metrics | grep -E '^vllm:(prompt_tokens_total|generation_tokens_total|request_success_total|prefix_cache_(queries|hits)_total)' | sed 's/model_name="[^"]*",\?//; s/engine="0",\?//'
}
ask() {
  curl -s http://127.0.0.1:8400/v1/completions -H 'Content-Type: application/json' -d '{"model":"vsnap/tiny-qwen3","prompt":"The capital of France is","max_tokens":7,"temperature":0}' | head -c 300; echo
}
t0=$(date +%s)
vllm snapshot create vsnap/tiny-qwen3 --revision $R --tokenizer-revision $R --dtype float32 --max-model-len 512 --enforce-eager --snapshot-dir /work/art > /work/create.log 2>&1
echo "create rc=$? in $(( $(date +%s) - t0 )) s"; tail -3 /work/create.log
for round in 1 2; do
  t0=$(date +%s)
  vllm snapshot restore /work/art --host 127.0.0.1 --port 8400 > /work/restore$round.log 2>&1
  echo "restore $round rc=$? in $(( $(date +%s) - t0 )) s"; tail -2 /work/restore$round.log
  counters "restore $round ready"
  ask
  counters "restore $round after one request (5 prompt, 7 generated, length)"
  pid=$(cat /work/art/restored.pid 2>/dev/null)
  sid=$(ps -o sid= -p "$pid" | tr -d ' ')
  echo "killing session $sid (restored pid $pid)"
  for p in $(ps -eo pid=,sid= | awk -v s="$sid" '$2==s {print $1}'); do kill -KILL $p 2>/dev/null; done
  sleep 2
done
