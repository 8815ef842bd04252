#!/usr/bin/env bash
# Finding 02: every `vllm snapshot create` leaves entries in /dev/shm that no process holds: the two psm_* segments
# of vLLM's shared-memory message queues (about 400 MB) and one sem.mp-* semaphore name. CRIU's dump SIGKILLs the
# tree, its multiprocessing resource tracker included, so nothing unregisters them. With --ipc=host (vLLM's own e2e
# setup) they are the host's and stay until a restored instance of that artifact exits gracefully, or a reboot.
# Steps: list /dev/shm; create; list /dev/shm again; ask every process whether it maps or holds a new entry.
# Exit 0: the create left psm_* and sem.mp-* entries that no process holds. 1: it left none (or they are held).
# 2: cannot run. About 2-4 minutes on 2 cores.
FINDING=02
# shellcheck source-path=SCRIPTDIR source=../common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"

b="$TAG"
box "$b" --network=host --ipc=private --shm-size=2g
before="$(shm_now "$b")"
say "/dev/shm before create: ${before:-(no psm_* / sem.mp-*)}"
create "$b"
mapfile -t left < <(comm -13 <(printf '%s\n' "$before") <(shm_now "$b"))
say "/dev/shm entries the create left:"
((${#left[@]})) || verdict 1 "the create left nothing in /dev/shm"
for n in "${left[@]}"; do say "  $(x "$b" "stat -c '%s bytes %n' /dev/shm/$n")"; done
say "the dumped tree: $(tree "$b") — alive: $(alive "$b" | tr '\n' ' ')"
holders="$(x "$b" "for n in ${left[*]}; do grep -l \"/dev/shm/\$n\" /proc/[0-9]*/maps 2>/dev/null; for f in /proc/[0-9]*/fd/*; do [ \"\$(readlink \$f 2>/dev/null)\" = /dev/shm/\$n ] && echo \$f; done; done; true")"
say "processes that map or hold them: ${holders:-none}"
[[ -z "$holders" ]] || verdict 1 "a live process still holds what the create left"
psm=0 sem=0
for n in "${left[@]}"; do
  case "$n" in psm_*) psm=$((psm + 1)) ;; sem.mp-*) sem=$((sem + 1)) ;; esac
done
((psm && sem)) || verdict 1 "the create left ${left[*]}, not both psm_* segments and a sem.mp-* name"
verdict 0 "one create left $psm psm_* segment(s) and $sem sem.mp-* name(s) in /dev/shm that no process holds"
