#!/usr/bin/env bash
# Idempotent: install the Docker engine from Debian's packages if missing, start dockerd if it is not
# answering, and wait until `docker info` succeeds. Safe to call from .ci/run, make and by hand.
set -euo pipefail

log() { echo "docker-up: $*" >&2; }

if ! command -v dockerd >/dev/null 2>&1; then
  log "installing docker.io and debootstrap from Debian"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq docker.io debootstrap >/dev/null
fi
if ! command -v debootstrap >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq debootstrap >/dev/null
fi

# CRIU cannot dump io_uring state and vLLM's processes create io_uring instances unless the host disables them
# for everyone (2); vLLM's own e2e requires 2, and the harness's preflight refuses to start otherwise. We are
# root on CI and dev machines, so set it here and say so (it affects the whole host until reboot).
io_uring=/proc/sys/kernel/io_uring_disabled
if [[ -w "$io_uring" && "$(cat "$io_uring")" != 2 ]]; then
  log "setting kernel.io_uring_disabled=2 (was $(cat "$io_uring")): CRIU snapshots need it"
  echo 2 >"$io_uring"
elif [[ -e "$io_uring" && "$(cat "$io_uring")" != 2 ]]; then
  log "kernel.io_uring_disabled is $(cat "$io_uring") and not writable here: snapshots will be refused" \
    "(as root: sysctl -w kernel.io_uring_disabled=2)"
fi

if docker info >/dev/null 2>&1; then
  log "engine already running"
  exit 0
fi

log "starting dockerd (log: /var/log/dockerd.log)"
nohup dockerd --storage-driver=overlay2 >/var/log/dockerd.log 2>&1 &
for _ in $(seq 1 120); do
  if docker info >/dev/null 2>&1; then
    log "engine up: $(docker version --format '{{.Server.Version}}')"
    exit 0
  fi
  sleep 0.5
done
log "dockerd did not answer within 60 s; last log lines:"
tail -n 20 /var/log/dockerd.log >&2 || true
exit 1
