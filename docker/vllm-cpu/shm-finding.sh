#!/usr/bin/env bash
# "The artifact is not self-contained": the /dev/shm evidence for one vLLM release and one IPC mode, by hand, with
# real vLLM and real CRIU (docs/real-vllm-differences.md, that section; transcripts in evidence/real-vllm/2026-12-01-shm-finding-dd6f44a/).
# Usage: shm-finding.sh VERSION host|private OUTDIR [--serve]
# A lane-like container of vsnap-vllm-cpu:VERSION with the harness's all-caps settings (every capability but
# SYS_RESOURCE, seccomp/AppArmor unconfined, --init, host pid and network), IPC --ipc=host or private with
# --shm-size=2g, vsnap-qual's probe at /vsnap/probe and the CPU smoke platform at /vsnap/smoke (both on PYTHONPATH, as
# a smoke-mode lane has them), a control directory at /vsnap/control (the probe's fault switch), env
# VLLM_USE_V2_MODEL_RUNNER=0 VLLM_SERVER_DEV_MODE=1 HF_HUB_OFFLINE=1. Each step goes to OUTDIR/transcript.md with its
# command, an excerpt of its output, exit status and seconds. Branches, each on its own artifact:
#   A  create (+ the pristine copy P, `cp -a`, as injection.prepare_artifact), what the dump holds (crit),
#      restore r1 / SIGKILL to the whole tree / r2 (c, e) / `rm -rf A && cp -a P A` + r3 (f: new inodes) /
#      SIGTERM to the restored root (b) / restore again (b) / reset + restore (f)
#   D  a fresh container (own IPC namespace, empty /dev/shm) given only P (docker cp), restore (d)
#   K  SIGKILL to the restored root only: who is left, what becomes of /dev/shm, restore again
#   R  restore, `docker restart` of the container (the restored tree left running), restore again (e)
#   F  the harness's fault sequence (faults.run_fault): reset, wake-raise armed (the probe's hook raises in the
#      restored worker's wake_up(kv_cache)), restore, follow-up restore; reset, restore (the next fault) (f)
#   --serve: first a cold `vllm serve` (compiled, as the harness's ordinary step), ready time, SIGTERM.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
version="${1:?usage: shm-finding.sh VERSION host|private OUTDIR [--serve]}"
ipc="${2:?}"
out="$(mkdir -p "${3:?}" && cd "$3" && pwd)"
serve="${4:-}"
image="vsnap-vllm-cpu:$version"
model=vsnap/tiny-qwen3
rev=b04193068dc9e2d037b36de7fec6ef00cdea53c5
name="vsnap-h1-shm-${version//./}-$ipc"
A=/vsnap/work/snap
P=/vsnap/work/pristine
engine="$model --revision $rev --tokenizer-revision $rev --dtype float32 --max-model-len 512 --enforce-eager"
transcript="$out/transcript.md"
: >"$transcript"
case "$ipc" in
  host) ipc_args=(--ipc=host) ;;
  private) ipc_args=(--ipc=private --shm-size=2g) ;;
  *) echo "IPC mode must be host or private" >&2; exit 2 ;;
esac
control="$(mktemp -d "${TMPDIR:-/tmp}/vsnap-h1-control.XXXXXX")"
mkdir -p "$control/faults" "$control/probe"
segs="$out/.segments"
: >"$segs"

run_box() {  # run_box NAME IPC-ARGS...: a lane-like container
  local box=$1; shift
  docker run -d --name "$box" --label ai.vsnap.owner=vsnap-h1 --init --user 0 \
    --cap-add ALL --cap-drop SYS_RESOURCE --security-opt seccomp=unconfined --security-opt apparmor=unconfined \
    --pid=host --network=host "$@" \
    -v "$repo/vsnap_qual/probe:/vsnap/probe:ro" -v "$repo/vsnap_qual/smoke:/vsnap/smoke:ro" -v "$control:/vsnap/control" \
    -e VLLM_USE_V2_MODEL_RUNNER=0 -e VLLM_SERVER_DEV_MODE=1 -e HF_HUB_OFFLINE=1 \
    -e PYTHONPATH=/vsnap/probe:/vsnap/smoke -e VSNAP_CONTROL_DIR=/vsnap/control \
    "$image" sleep infinity >/dev/null
  docker exec "$box" mkdir -p -m 0700 /vsnap/work
}
boxes=("$name")
cleanup() {
  for b in "${boxes[@]}"; do
    # our segments only: the ones this run's artifacts name (with host IPC, /dev/shm is the host's)
    if [[ -s "$segs" ]]; then docker exec "$b" sh -c "rm -f $(tr '\n' ' ' <"$segs")" 2>/dev/null || true; fi
    docker rm -f "$b" >/dev/null 2>&1 || true
  done
  rm -f "$segs" "$out/.last"
  rm -rf "$control" "$out/.images"
}
trap cleanup EXIT

note() { printf '%s\n' "$*" >>"$transcript"; }
# step TITLE CMD...: run CMD, keep the command, its output (head and tail when long) and status in the transcript.
step() {
  local title=$1; shift
  local t0=$SECONDS rc=0 log="$out/.last"
  "$@" >"$log" 2>&1 || rc=$?
  {
    printf '\n### %s\n\n```\n$ %s\n' "$title" "$(printf '%s ' "$@" | cut -c1-400)"
    if (( $(wc -l <"$log") > 60 )); then head -n 15 "$log"; echo "[... $(( $(wc -l <"$log") - 45 )) lines ...]"; tail -n 30 "$log"; else cat "$log"; fi
    printf '[exit %s, %s s]\n```\n' "$rc" "$((SECONDS - t0))"
  } >>"$transcript"
  echo "shm-finding $version/$ipc: $title: exit $rc ($((SECONDS - t0)) s)" >&2
  return 0
}
box="$name"  # the container the helpers below act on
xs() { docker exec "$box" sh -c "$*"; }
shm() { xs "ls -la --time-style=+%T /dev/shm | grep -E 'psm_|sem\\.|link_remap' || echo '(no psm_* / sem.* / link_remap.* in /dev/shm)'"; }
tree() { xs "python3 -c 'import json;print(\" \".join(map(str,json.load(open(\"$A/manifest.json\"))[\"process_tree\"])))'"; }
alive() { local t; t="$(tree)"; xs "for p in $t; do [ -d /proc/\$p ] && echo \$p \$(cut -d' ' -f3 /proc/\$p/stat) \$(tr '\\0' ' ' </proc/\$p/cmdline | cut -c1-70); done; echo '(end of list)'"; }
secs() { python3 -c "import time;print(round(time.time()-$1,1))"; }
shmnames() { xs "ls /dev/shm | grep -E '^(psm_|sem\\.)' | sort"; }
create() {  # create: vllm snapshot create into A (after rm -rf A P); records the /dev/shm entries it left
  local t0 before; t0=$(date +%s.%N)
  before="$(shmnames)"
  xs "rm -rf $A $P; vllm snapshot create $engine --snapshot-dir $A > /tmp/create.out 2>/tmp/create.err; rc=\$?; echo create exit \$rc; tail -n 2 /tmp/create.err; exit \$rc" || return $?
  # new psm_* / sem.* entries that appeared in /dev/shm during this create (with host IPC, another job could add
  # one at the same moment; none did in the recorded runs): ours, removed at the end
  comm -13 <(echo "$before") <(shmnames) | sed 's|^|/dev/shm/|' | tee -a "$segs" | sed 's|^|left in /dev/shm by this create: |'
  echo "create took $(secs "$t0") s"
  xs "python3 -c 'import json;m=json.load(open(\"$A/manifest.json\"));print(\"artifact_bytes\",m[\"artifact_bytes\"],\"process_tree\",m[\"process_tree\"],\"cuda_holders\",m[\"cuda_holders\"],\"vllm_version\",m[\"vllm_version\"])'; \
      du -sb $A; ls $A; echo images: \$(ls $A/images | wc -l) files; ls $A/link-remaps 2>/dev/null"
  xs "python3 - <<'PY'
import re
data = open('$A/images/files.img', 'rb').read()
print('\n'.join(sorted({'/' + m.decode().lstrip('/') for m in re.findall(rb'/?dev/shm/[A-Za-z0-9_.-]+', data)})))
PY" >>"$segs"
  sort -u -o "$segs" "$segs"
}
restore() {  # restore PORT: the CLI's exit, stderr's last line, vLLM's CRIU lines on stdout (0.32), restore.log's errors
  local t0; t0=$(date +%s.%N)
  xs "vllm snapshot restore $A --host 127.0.0.1 --port $1 > /tmp/restore.out 2> /tmp/restore.err; echo \$? > /tmp/restore.rc"
  echo "restore exit $(xs 'cat /tmp/restore.rc') after $(secs "$t0") s"
  xs "echo '--- stderr, last line:'; grep -v '^\s*\$' /tmp/restore.err | tail -n 1 | cut -c1-600; \
      echo '--- stdout, CRIU lines vLLM logged:'; grep -E 'Error \\(|Restoring FAILED|CRIU .*tail' /tmp/restore.out | head -n 12; \
      echo '--- $A/images/restore.log, Error lines:'; grep -E 'Error|FAILED' $A/images/restore.log | head -n 12; exit \$(cat /tmp/restore.rc)"
}
canary() {
  xs "curl -sS --max-time 120 http://127.0.0.1:$1/v1/completions -H 'content-type: application/json' \
      -d '{\"model\":\"$model\",\"prompt\":\"The capital of France is\",\"max_tokens\":1,\"min_tokens\":1,\"temperature\":0,\"seed\":0,\"logprobs\":0,\"return_token_ids\":true}' \
      | python3 -c 'import json,sys;c=json.load(sys.stdin)[\"choices\"][0];print(c[\"token_ids\"],repr(c[\"text\"]),c[\"logprobs\"][\"token_logprobs\"][0])'; \
      python3 -c 'import json;m=json.load(open(\"$A/manifest.json\"));print(\"oracle\",m[\"oracle_token_ids\"],repr(m[\"oracle_text\"]),m[\"oracle_sampled_token_logprob\"])'"
}
fds() {  # the restored processes' stdio and shared-memory descriptors, as /proc shows them
  local t; t="$(tree)"
  xs "for p in $t; do printf '%s %s\\n   ' \$p \"\$(tr '\\0' ' ' </proc/\$p/cmdline | cut -c1-70)\"; \
      for f in 0 1 2; do printf 'fd%s=%s ' \$f \"\$(readlink /proc/\$p/fd/\$f)\"; done; \
      for f in /proc/\$p/fd/*; do l=\$(readlink \$f); case \$l in /dev/shm/*|*child.log*) printf 'fd%s=%s ' \${f##*/} \"\$l\";; esac; done; echo; done"
}
waitgone() { local t; t="$(tree)"; xs "for i in \$(seq 600); do n=0; for p in $t; do [ -d /proc/\$p ] && n=1; done; [ \$n = 0 ] && break; sleep 0.1; done; echo left: \$(for p in $t; do [ -d /proc/\$p ] && echo \$p; done)"; }
kill9() { local t; t="$(tree)"; xs "kill -KILL $t 2>/dev/null"; waitgone; }
kill9root() { local t; t="$(tree)"; xs "kill -KILL ${t%% *}; sleep 20"; echo "20 s after SIGKILL to the root ${t%% *}, of the tree [$t]:"; alive; }
term() { local t t0; t="$(tree)"; t0=$(date +%s.%N); xs "kill -TERM ${t%% *}"; waitgone; echo "SIGTERM to ${t%% *}: all of [$t] gone after $(secs "$t0") s"; }
reset() { xs "rm -rf $A && cp -a $P $A && stat -c '%n inode %i size %s' $A/child.log && echo snapshot-size \$(cat $A/child.log.snapshot-size)"; }
pristine() { xs "cp -a $A $P && stat -c '%n inode %i size %s' $A/child.log $P/child.log && du -sb $P"; }
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
childlog() { xs "echo child.log size \$(stat -c %s $A/child.log), snapshot-size \$(cat $A/child.log.snapshot-size); tail -c +\$((\$(cat $A/child.log.snapshot-size)+1)) $A/child.log | tail -n ${1:-8} | cut -c1-240"; }
arm() { printf '{"point": "%s", "stall_s": null}' "$1" >"$control/faults/armed.json"; rm -f "$control"/faults/fired-*.json; echo "armed $1"; }
disarm() { rm -f "$control/faults/armed.json"; echo "fired: $(cd "$control/faults" && ls fired-*.json 2>/dev/null | paste -sd' ')"; }

docker rm -f "$name" >/dev/null 2>&1 || true
run_box "$name" "${ipc_args[@]}"
note "# /dev/shm finding: vLLM $version (\`$image\`, $(docker image inspect --format '{{.Id}}' "$image" | cut -c1-19)), IPC $ipc"
note ""
note "Container \`$name\`: \`--init --user 0 --cap-add ALL --cap-drop SYS_RESOURCE --security-opt seccomp=unconfined --security-opt apparmor=unconfined --pid=host --network=host ${ipc_args[*]}\`; /vsnap/probe and /vsnap/smoke bound read-only and on PYTHONPATH; env VLLM_USE_V2_MODEL_RUNNER=0 VLLM_SERVER_DEV_MODE=1 HF_HUB_OFFLINE=1 VSNAP_CONTROL_DIR=/vsnap/control. Engine: \`$engine\`. Host: kernel $(uname -r), kernel.io_uring_disabled=$(cat /proc/sys/kernel/io_uring_disabled), $(date -u +%FT%TZ), 2 cores shared with other jobs."

if [[ "$serve" == --serve ]]; then
  sp=$(port)
  step "cold vllm serve (compiled, no --enforce-eager), ready = /health 200; then SIGTERM" xs "t0=\$(date +%s.%N); vllm serve $model --revision $rev --dtype float32 --max-model-len 512 --host 127.0.0.1 --port $sp > /tmp/serve.log 2>&1 & \
    pid=\$!; until curl -sf http://127.0.0.1:$sp/health >/dev/null; do kill -0 \$pid 2>/dev/null || { tail -5 /tmp/serve.log; exit 1; }; sleep 0.5; done; \
    echo ready after \$(python3 -c \"import time;print(round(time.time()-\$t0,1))\") s; grep -m1 'KV cache size' /tmp/serve.log | cut -c1-200; ls /dev/shm | grep psm_ | sed 's/^/while serving: /'; \
    kill -TERM \$pid; wait \$pid; echo serve exit \$?; grep -m1 'leaked shared_memory' /tmp/serve.log; ls /dev/shm | grep psm_ | sed 's/^/after SIGTERM: /'; true"
fi

note ""; note "## A: create, SIGKILL vs SIGTERM, the harness's reset (b, c, e, f)"
step "baseline /dev/shm" shm
step "create A" create
step "/dev/shm after create (a)" shm
step "the /dev/shm paths CRIU's files.img names, and their sizes (a)" xs "for f in $(tr '\n' ' ' <"$segs"); do ls -la \$f 2>&1; done; df -h /dev/shm | tail -1"
step "pristine copy P = cp -a A P (injection.prepare_artifact)" pristine
img="$out/.images"
rm -rf "$img" && mkdir -p "$img"
docker exec "$name" tar -C "$A/images" --exclude='pages-*.img' -cf - . | tar -C "$img" -xf -
step "crit x images fds: every dumped process's descriptors (a, f)" bash "$repo/scripts/crit.sh" x "$img" fds
step "crit show files.img: the regular files the dump names by path, with the size CRIU will check (a, f)" bash -c "bash '$repo/scripts/crit.sh' show '$img/files.img' | python3 -c '
import json, sys
for e in json.load(sys.stdin)[\"entries\"]:
    reg = e.get(\"reg\")
    if reg and not reg[\"name\"].startswith((\"/usr/\", \"/opt/vllm/lib\", \"/opt/hf\", \"/opt/vsnap-criu\")):
        print(e[\"id\"], reg[\"name\"], \"size\", reg.get(\"size\"), \"flags\", reg.get(\"flags\"), \"pos\", reg.get(\"pos\"))
'"
rm -rf "$img"
p=$(port); step "r1: restore" restore "$p"
step "r1: canary (vLLM's own prompt) vs the manifest's oracle" canary "$p"
step "r1: the restored processes' fds 0-2, /dev/shm and child.log descriptors (f)" fds
step "SIGKILL to every process of the restored tree at once (c)" kill9
step "/dev/shm after SIGKILL of the whole tree (c)" shm
p=$(port); step "r2: restore again after SIGKILL (c, e: twice in a row, kill -9 between)" restore "$p"
step "r2: canary" canary "$p"
step "SIGKILL r2's tree" kill9
step "reset: rm -rf A && cp -a P A (injection.reset_artifact: new inodes) (f)" reset
p=$(port); step "r3: restore from the reset artifact (f)" restore "$p"
step "r3: canary" canary "$p"
step "SIGTERM to r3's restored root: vLLM's own shutdown (b)" term
step "/dev/shm after the graceful exit (b)" shm
step "what the restored tree wrote to child.log past the snapshot size" childlog 12
p=$(port); step "r4: restore after the graceful exit (b)" restore "$p"
step "r4: the tree afterwards" alive
step "reset: rm -rf A && cp -a P A, as the harness's next fault does (f)" reset
p=$(port); step "r5: restore from the reset artifact after the graceful exit (f)" restore "$p"

note ""; note "## D: a fresh box given only the artifact (d)"
fresh="$name-fresh"
boxes+=("$fresh")
docker rm -f "$fresh" >/dev/null 2>&1 || true
run_box "$fresh" --ipc=private --shm-size=2g
box="$fresh"
step "fresh box (own IPC namespace, --shm-size=2g): /dev/shm" xs "ls -la /dev/shm"
step "fresh box: the pristine artifact copied in (docker exec tar | docker exec tar)" bash -c "docker exec $name tar -C /vsnap/work -cf - pristine | docker exec -i $fresh tar -C /vsnap/work -xf - && docker exec $fresh sh -c 'mv /vsnap/work/pristine $A && stat -c \"%n %a %U\" $A && du -sb $A'"
p=$(port); step "fresh box: restore (d)" restore "$p"
step "fresh box: /dev/shm after the restore" shm
box="$name"
docker rm -f "$fresh" >/dev/null 2>&1 || true

note ""; note "## K: SIGKILL to the restored root only"
step "create A (K)" create
p=$(port); step "restore" restore "$p"
step "canary" canary "$p"
step "SIGKILL to the restored root only, 20 s later: who is left" kill9root
step "/dev/shm 20 s after SIGKILL of the root only" shm
step "child.log past the snapshot size" childlog 8
step "SIGKILL to what is left" kill9
p=$(port); step "restore after SIGKILL of the root only" restore "$p"
step "SIGKILL (end of K)" kill9

note ""; note "## R: docker restart (e)"
step "create A (R)" create
p=$(port); step "restore" restore "$p"
step "canary" canary "$p"
step "docker restart of the container, the restored tree left running" bash -c "t0=\$SECONDS; docker restart -t 10 $name >/dev/null && echo restarted in \$((SECONDS-t0)) s"
step "/dev/shm after docker restart (e)" shm
step "the restored tree after docker restart" alive
p=$(port); step "restore after docker restart (e)" restore "$p"
step "canary after docker restart" canary "$p"
step "SIGKILL (end of R)" kill9

note ""; note "## F: the harness's fault sequence (faults.run_fault), wake-raise then the next fault (f)"
step "create A (F)" create
step "pristine copy P" pristine
step "fault 1: reset (rm -rf A && cp -a P A)" reset
step "fault 1: arm wake-raise (the probe raises in the restored worker's wake_up(kv_cache))" arm wake-raise
p=$(port); step "fault 1: the faulted restore" restore "$p"
step "fault 1: disarm; fired records" disarm
step "fault 1: the tree after the faulted restore" alive
step "fault 1: /dev/shm after vLLM's cleanup of the faulted restore" shm
step "fault 1: child.log past the snapshot size" childlog 10
p=$(port); step "fault 1: follow-up restore (the artifact as the failure left it)" restore "$p"
step "fault 2: reset (rm -rf A && cp -a P A)" reset
p=$(port); step "fault 2: restore (any next fault's restore)" restore "$p"
step "fault 2: the tree afterwards" alive
step "/dev/shm at the end (before cleanup)" shm
note ""
note "Segments this run's artifacts named (removed at the end if still there): $(paste -sd' ' "$segs")"
