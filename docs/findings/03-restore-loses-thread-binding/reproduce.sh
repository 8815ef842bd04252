#!/usr/bin/env bash
# Finding 03: a restored CPU engine's worker has lost its OpenMP thread binding. vLLM's CPU worker binds its OpenMP
# threads to the cores it chose (on a 2-CPU box: CPU 0) once, as it starts; CRIU's images carry no CPU affinity, so
# after `vllm snapshot restore` every thread of the worker may run on every CPU the restoring process may use, and
# nothing in vLLM binds them again. (Docs elsewhere report restored engines decoding up to 2.16x slower; this
# script shows only the lost binding, which measurements did not confirm as that slowdown's cause.)
# Steps: an ordinary `vllm serve`, its worker's threads' Cpus_allowed_list, SIGTERM; create; restore; the restored
# worker's threads' Cpus_allowed_list.
# Exit 0: the ordinary worker has threads bound to fewer CPUs than the box has and the restored worker has none.
# 1: the restored worker kept a binding. 2: cannot run (e.g. vLLM bound nothing here: one CPU). About 5-7 minutes.
FINDING=03
# shellcheck source-path=SCRIPTDIR source=../common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"

# masks ROOT: the CPU masks of the threads of ROOT's descendant titled VLLM::Worker, as "COUNT×MASK" pairs, and the
# number of those threads bound to fewer CPUs than this shell may use (last line: "bound N of M").
masks() {
  docker exec -i "$b" python3 - "$1" <<'PY'
import collections, os, sys
def status(path, key):
    for line in open(path):
        if line.startswith(key + ":"):
            return line.split(":", 1)[1].strip()
kids = collections.defaultdict(list)
for p in filter(str.isdigit, os.listdir("/proc")):
    try:
        kids[int(status(f"/proc/{p}/status", "PPid"))].append(int(p))
    except (OSError, TypeError):
        pass
stack, worker = [int(sys.argv[1])], None
while stack and worker is None:
    pid = stack.pop()
    if open(f"/proc/{pid}/cmdline", "rb").read().startswith(b"VLLM::Worker"):
        worker = pid
    stack.extend(kids[pid])
if worker is None:
    sys.exit("no VLLM::Worker under PID %s" % sys.argv[1])
box = status("/proc/self/status", "Cpus_allowed_list")
seen = collections.Counter(status(f"/proc/{worker}/task/{t}/status", "Cpus_allowed_list") for t in os.listdir(f"/proc/{worker}/task"))
print(f"worker PID {worker}, box CPUs {box}: " + ", ".join(f"{n}x[{m}]" for m, n in sorted(seen.items())))
print(f"bound {sum(n for m, n in seen.items() if m != box)} of {sum(seen.values())}")
PY
}

b="$TAG"
box "$b" --network=host --ipc=private --shm-size=2g
port="$(free_port)"
say "ordinary vllm serve (the same engine arguments):"
x "$b" "vllm serve $ENGINE --host 127.0.0.1 --port $port >/tmp/serve.log 2>&1 & echo \$! >/tmp/serve.pid; \
  for i in \$(seq 1200); do curl -sf http://127.0.0.1:$port/health >/dev/null && exit 0; kill -0 \$(cat /tmp/serve.pid) || exit 1; sleep 0.5; done; exit 1" ||
  { x "$b" "tail -n 5 /tmp/serve.log" || true; verdict 2 "the ordinary vllm serve did not become ready"; }
x "$b" "grep -m 3 -iE 'omp|bind|core ids' /tmp/serve.log | cut -c1-220" || true
ordinary="$(masks "$(x "$b" "cat /tmp/serve.pid")")"
say "  $(head -n 1 <<<"$ordinary")"
x "$b" "kill -TERM \$(cat /tmp/serve.pid); while kill -0 \$(cat /tmp/serve.pid) 2>/dev/null; do sleep 0.2; done"
bound_ordinary="$(tail -n 1 <<<"$ordinary" | cut -d' ' -f2)"
((bound_ordinary > 0)) || verdict 2 "vLLM bound none of the ordinary worker's threads here (nothing a restore could lose)"

create "$b"
port="$(free_port)"
restore "$b" "$port" || verdict 2 "the restore of a fresh artifact failed"
canary "$b" "$port"
restored="$(masks "$(tree "$b" | cut -d' ' -f1)")"
say "restored engine:"
say "  $(head -n 1 <<<"$restored")"
kill_tree "$b"
bound_restored="$(tail -n 1 <<<"$restored" | cut -d' ' -f2)"
((bound_restored == 0)) || verdict 1 "the restored worker kept $bound_restored bound thread(s)"
verdict 0 "the ordinary worker had $bound_ordinary thread(s) bound to fewer CPUs than the box; the restored worker has none"
