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
