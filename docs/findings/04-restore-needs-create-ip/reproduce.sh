#!/usr/bin/env bash
# Finding 04: an artifact restores only where the create's IP address exists. The dumped tree holds TCP sockets
# bound to the address the create's network namespace had (torch.distributed's gloo transport binds to the address
# the host name resolves to, even for one worker); CRIU re-binds them at restore, and a box with another address
# cannot.
# Steps: box A and box B on Docker's default bridge (two addresses), one IPC namespace (A's, shared: the /dev/shm
# segments the artifact needs, finding 01) and one volume for the artifact; B also gets A's /tmp (the compile cache
# the dump maps, finding 05). Create in A; restore in B; then, as the control, restore the same artifact in A.
# Exit 0: the restore in B fails on a socket bound to A's address and the restore in A works. 1: B restores, or
# fails otherwise. 2: cannot run. About 4-6 minutes on 2 cores.
FINDING=04
# shellcheck source-path=SCRIPTDIR source=../common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"

# tcp_sockets BOX: every TCP socket of the artifact's process tree: PID, state, local and remote address
tcp_sockets() {
  docker exec -i "$1" python3 - "$(tree "$1")" <<'PY'
import os, socket, struct, sys
states = {"01": "ESTABLISHED", "0A": "LISTEN"}
table = {}
for line in open("/proc/net/tcp").readlines()[1:]:
    f = line.split()
    addr = lambda h: "%s:%d" % (socket.inet_ntoa(struct.pack("<I", int(h.split(":")[0], 16))), int(h.split(":")[1], 16))
    table[f[9]] = (states.get(f[3], f[3]), addr(f[1]), addr(f[2]))
for pid in sys.argv[1].split():
    for fd in os.listdir(f"/proc/{pid}/fd"):
        target = os.readlink(f"/proc/{pid}/fd/{fd}")
        inode = target[len("socket:["):-1] if target.startswith("socket:[") else None
        if inode in table:
            print("  PID %s fd %s: %s %s -> %s" % (pid, fd, *table[inode]))
PY
}

vol="$TAG-artifact"
docker volume create --label "ai.vsnap.finding=$FINDING" "$vol" >/dev/null
trap 'cleanup; docker volume rm -f "$vol" >/dev/null 2>&1 || true' EXIT
a="$TAG-a" b="$TAG-b"
box "$a" --network=bridge --ipc=shareable --shm-size=2g -v "$vol:$WORK"
box "$b" --network=bridge --ipc="container:$a" -v "$vol:$WORK"
x "$a" "chmod 0700 $WORK"
ip_a="$(x "$a" "hostname -i")" ip_b="$(x "$b" "hostname -i")"
say "box A: address $ip_a; box B: address $ip_b (one IPC namespace, one artifact volume)"
[[ "$ip_a" != "$ip_b" ]] || verdict 2 "the two boxes got the same address"

create "$a"
say "box A's /tmp (the compile cache the dump maps) copied into box B"
docker exec "$a" tar -C / -cf - tmp 2>/dev/null | docker exec -i "$b" tar -C / -xf - ||
  say "  (tar reported a file it could not copy; sockets are skipped)"

port="$(free_port)"
say "restore in box B ($ip_b):"
if restore "$b" "$port"; then
  canary "$b" "$port"
  kill_tree "$b"
  verdict 1 "the artifact made at $ip_a restored in a box with address $ip_b"
fi
x "$b" "grep -hiE 'inet|bind|addr' $ART/images/restore.log | grep -iE 'error' | sort -u | head -n 5" || true
bind_failed=0
x "$b" "grep -qiE \"(bind|inet).*(Cannot assign requested address|errno 99|-99)|Can't bind inet socket\" $ART/images/restore.log" && bind_failed=1

port="$(free_port)"
say "control: the same artifact restored in box A ($ip_a):"
restore "$a" "$port" || verdict 1 "the artifact does not restore in box A either: the failure in B is not about the address"
canary "$a" "$port"
say "TCP sockets the restored tree holds in box A (its /proc/<pid>/fd against /proc/net/tcp):"
tcp_sockets "$a"
kill_tree "$a"
((bind_failed)) || verdict 1 "the restore in B failed, but CRIU's log names no socket it could not bind"
verdict 0 "the artifact restores in box A ($ip_a) but not in box B ($ip_b): CRIU cannot bind the dumped TCP sockets to $ip_a there"
