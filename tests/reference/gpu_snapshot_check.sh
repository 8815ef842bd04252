#!/bin/bash
# On a bare GPU host (root, python3 with CUDA torch, no Docker): the reference engine's full snapshot lifecycle on
# real CRIU + CRIU's CUDA plugin + the kit's cuda-checkpoint: serve (cold start), create, restore, completions,
# PIDs. Usage: tests/reference/gpu_snapshot_check.sh KIT_TARBALL   (docker/criu/export.sh makes it); OUT gets logs.
set -u
kit_tarball=$1; out=${OUT:-/tmp/gpu-snapshot-out}; mkdir -p "$out"
R=7f3a9c2e5b1d4086a2e4c6b8d0f1a3c5e7092b4d
P=/tmp/vref; rm -rf $P; mkdir -p $P/site $P/bin
tar -C $P -xzf "$kit_tarball"
export PATH=$P/vsnap-criu/sbin:$P/vsnap-criu/bin:$P/bin:$PATH CRIU_CUDA_PLUGIN_DIR=$P/vsnap-criu/lib/criu
export PYTHONPATH=$P/site HF_HOME=$P/hf HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1
sysctl kernel.io_uring_disabled 2>/dev/null; criu --version | head -1; nvidia-smi -L
python3 docker/reference/tools/install_engine.py docker/reference/engine head $P/site $P/bin >/dev/null
python3 docker/reference/tools/make_model.py $HF_HOME vsnap/tiny-qwen3 $R >/dev/null || exit 4
ARGS="vsnap/tiny-qwen3 --revision $R --dtype float16 --max-model-len 512 --gpu-memory-utilization 0.02"
C='{"model":"vsnap/tiny-qwen3","prompt":"The capital of France is","max_tokens":1,"min_tokens":1,"temperature":0,"logprobs":0}'
now() { date +%s.%N; }
t0=$(now); vllm serve $ARGS --host 127.0.0.1 --port 18000 > $out/serve.log 2>&1 & SP=$!
until curl -sf localhost:18000/health >/dev/null; do sleep 0.05; done; t1=$(now)
echo "cold start ready: $(python3 -c "print(round($t1-$t0,2))") s; $(curl -s localhost:18000/v1/completions -H 'Content-Type: application/json' -d "$C" | python3 -c 'import json,sys; c=json.load(sys.stdin)["choices"][0]; print(c["text"], c["logprobs"]["token_logprobs"][0])')"
kill $SP; wait $SP
mkdir -p -m 0700 /tmp/snapw
t0=$(now); vllm snapshot create $ARGS --snapshot-dir /tmp/snapw/artifact > $out/create.out 2>&1; rc=$?; t1=$(now)
echo "create rc=$rc $(python3 -c "print(round($t1-$t0,2))") s; images $(du -sh /tmp/snapw/artifact/images | cut -f1)"
cp /tmp/snapw/artifact/images/dump.log /tmp/snapw/artifact/child.log $out/ 2>/dev/null
[ $rc = 0 ] || { tail -5 $out/create.out; ps -eo pid,ppid,stat,cmd | grep -E "vllm|python" | cut -c1-120; exit 5; }
python3 -c "import json; m=json.load(open('/tmp/snapw/artifact/manifest.json')); print('manifest', m['process_tree'], m['cuda_holders'], m['gpu_name'], m['driver_version'], m['torch_version'], m['cuda_runtime'])"
nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader
t0=$(now); vllm snapshot restore /tmp/snapw/artifact --host 127.0.0.1 --port 18001 > $out/restore.out 2>&1; rc=$?; t1=$(now)
echo "restore rc=$rc ready $(python3 -c "print(round($t1-$t0,2))") s; restored.pid $(cat /tmp/snapw/artifact/restored.pid)"
cp /tmp/snapw/artifact/images/restore.log $out/ 2>/dev/null
[ $rc = 0 ] || { tail -30 $out/restore.out; exit 6; }
echo "restored: $(curl -s localhost:18001/v1/completions -H 'Content-Type: application/json' -d "$C" | python3 -c 'import json,sys; c=json.load(sys.stdin)["choices"][0]; print(c["text"], c["logprobs"]["token_logprobs"][0])')"
nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader
grep -h -i "cuda_plugin\|cuda-checkpoint\|checkpoint" $out/dump.log $out/restore.log | head -12
root=$(cat /tmp/snapw/artifact/restored.pid); ps -o pid,sid,cmd --sid $root | cut -c1-100
for p in $(ps -o pid= --sid $root); do kill -9 $p; done
