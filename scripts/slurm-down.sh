#!/usr/bin/env bash
# Idempotent: stop the one-node Slurm cluster of scripts/slurm-up.sh ($VSNAP_SLURM_DIR, default
# /var/lib/vsnap-slurm): slurmd, then slurmctld, by their PID files, and munged only if slurm-up started it; waits
# until each is gone. It cancels no job: jobs still running are named (their processes would outlive slurmd), so
# scancel the ones you started first. The state directory and /etc/slurm/slurm.conf stay for the next slurm-up.
set -euo pipefail

log() { echo "slurm-down: $*" >&2; }
die() {
  log "$*"
  exit 1
}

DIR="${VSNAP_SLURM_DIR:-/var/lib/vsnap-slurm}"
STOP_TIMEOUT_S="${VSNAP_SLURM_DOWN_TIMEOUT:-30}"

[[ "$(id -u)" == 0 ]] || die "needs root: the daemons run as root"

# stop NAME PIDFILE: SIGTERM to the PID in PIDFILE if it runs NAME (not a reused PID), then wait until it is gone;
# SIGKILL only after the deadline, and say so.
stop() {
  local name="$1" pidfile="$2" pid
  pid="$(cat "$pidfile" 2>/dev/null || true)"
  if [[ -z "$pid" || "$(cat "/proc/$pid/comm" 2>/dev/null)" != "$name" ]]; then
    log "$name not running"
    return 0
  fi
  log "stopping $name (PID $pid)"
  kill -TERM "$pid" 2>/dev/null || true
  local deadline=$((SECONDS + STOP_TIMEOUT_S))
  while [[ -d "/proc/$pid" ]] && ((SECONDS < deadline)); do sleep 0.1; done
  if [[ -d "/proc/$pid" ]]; then
    log "$name (PID $pid) still there ${STOP_TIMEOUT_S} s after SIGTERM: SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    while [[ -d "/proc/$pid" ]]; do sleep 0.1; done
  fi
}

if [[ -f "$DIR/slurm.conf" && -f "$DIR/run/slurmctld.pid" ]]; then
  running="$(SLURM_CONF="$DIR/slurm.conf" squeue -h -t running,completing -o '%i %j' 2>/dev/null || true)"
  if [[ -n "$running" ]]; then
    log "jobs still running (not cancelled: their processes outlive slurmd; scancel the ones you started):"
    echo "$running" >&2
  fi
fi

stop slurmd "$DIR/run/slurmd.pid"
stop slurmctld "$DIR/run/slurmctld.pid"
if [[ -f "$DIR/munged.started" ]]; then
  stop munged "$(cat "$DIR/munged.started")"
  rm -f "$DIR/munged.started"
fi
log "cluster stopped (state kept in $DIR)"
