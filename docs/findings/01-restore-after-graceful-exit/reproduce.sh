#!/usr/bin/env bash
# Finding 01: once a restored instance exits gracefully, the artifact never restores again. vLLM's shared-memory
# message queues live in /dev/shm/psm_*; CRIU's images name them by path without their content, and the restored
# tree's multiprocessing resource tracker unlinks them at a graceful exit (SIGTERM to the restored API server).
# Steps: create; restore (canary = oracle); SIGTERM to the restored root; restore again.
# Exit 0: the second restore fails on a missing /dev/shm/psm_* the artifact needs. 1: it restores (or fails on
# something else). 2: cannot run. About 3-5 minutes on 2 cores.
FINDING=01
# shellcheck source-path=SCRIPTDIR source=../common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"

b="$TAG"
box "$b" --network=host --ipc=private --shm-size=2g
create "$b"
mapfile -t segments < <(files_img_shm "$b")
((${#segments[@]})) || verdict 1 "the dump names no /dev/shm/psm_* segment"
say "the /dev/shm paths CRIU's files.img names (reopened by path at restore; not in the artifact):"
x "$b" "ls -l ${segments[*]} | awk '{print \"  \" \$5, \$9}'"

port="$(free_port)"
restore "$b" "$port" || verdict 2 "the first restore of a fresh artifact failed"
canary "$b" "$port"
root="$(tree "$b" | cut -d' ' -f1)"
say "SIGTERM to the restored API server (PID $root): vLLM's own graceful shutdown"
x "$b" "kill -TERM $root"
wait_gone "$b" || verdict 2 "the restored tree did not exit after SIGTERM"
say "the restored tree is gone; /dev/shm now:"
missing=0
for s in "${segments[@]}"; do
  if x "$b" "test -e $s"; then say "  $s present"; else say "  $s MISSING"; missing=$((missing + 1)); fi
done
x "$b" "tail -c +\$((\$(cat $ART/child.log.snapshot-size) + 1)) $ART/child.log | grep -E 'leaked (shared_memory|semaphore)' | sed 's/^.*UserWarning: /  child.log: /'" || true

port="$(free_port)"
if restore "$b" "$port"; then
  kill_tree "$b"
  verdict 1 "the artifact restored again after a graceful exit of a restored instance"
fi
if x "$b" "grep -qhE \"Can't open file dev/shm/psm_[0-9a-f]+\" /tmp/restore.out $ART/images/restore.log"; then
  verdict 0 "after a graceful exit ($missing of ${#segments[@]} psm segments unlinked) the artifact no longer restores: CRIU cannot open /dev/shm/psm_*"
fi
verdict 1 "the second restore failed, but not on a /dev/shm/psm_* segment"
