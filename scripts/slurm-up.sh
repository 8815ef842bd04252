#!/usr/bin/env bash
# Idempotent: a one-node Slurm cluster on this host, for the tests of vsnap-qual's Slurm jobs and for trying them by
# hand. Installs Debian's slurm-wlm and munge if missing, creates a munge key if missing, starts munged if it is not
# answering, writes the cluster's slurm.conf into a state directory of its own ($VSNAP_SLURM_DIR, default
# /var/lib/vsnap-slurm), starts slurmctld and slurmd and waits until the node is idle. Needs root (as
# scripts/docker-up.sh). Stop it with scripts/slurm-down.sh.
#
# Clients find the cluster through /etc/slurm/slurm.conf, a link to the state directory's slurm.conf that this
# script makes when that path is free or already its own (its first line is the marker below); a slurm.conf there
# that something else wrote is left alone, and clients then need SLURM_CONF (printed at the end).
set -euo pipefail

log() { echo "slurm-up: $*" >&2; }
die() {
  log "$*"
  exit 1
}

DIR="${VSNAP_SLURM_DIR:-/var/lib/vsnap-slurm}"
CONF="$DIR/slurm.conf"
ETC_CONF=/etc/slurm/slurm.conf
PARTITION=vsnap
MARKER="# written by vsnap-qual's scripts/slurm-up.sh: a one-node cluster for its tests (state: $DIR)"
MARKER_PREFIX="# written by vsnap-qual's scripts/slurm-up.sh"
UP_TIMEOUT_S="${VSNAP_SLURM_UP_TIMEOUT:-60}"

[[ "$(id -u)" == 0 ]] || die "needs root: it installs packages and starts munged, slurmctld and slurmd"

# Start a daemon holding none of this script's descriptors but 0-2: a caller's lock (`flock FILE slurm-up.sh`)
# or pipe must not live on in munged or slurmd after this script exits.
detached() {
  (
    for fd in /proc/"$BASHPID"/fd/*; do
      fd="${fd##*/}"
      if [[ "$fd" =~ ^[0-9]+$ ]] && ((fd > 2)); then eval "exec $fd>&-" 2>/dev/null || true; fi
    done
    exec "$@"
  )
}

# --- packages -------------------------------------------------------------------------------------------------
if ! command -v slurmctld >/dev/null 2>&1 || ! command -v slurmd >/dev/null 2>&1 \
  || ! command -v sbatch >/dev/null 2>&1 || ! command -v munged >/dev/null 2>&1; then
  log "installing slurm-wlm and munge from Debian"
  export DEBIAN_FRONTEND=noninteractive
  # Another engineer's apt-get may hold the dpkg lock: wait for it rather than fail. The package lists may be
  # stale or absent on a fresh machine: update once if the plain install fails.
  apt_install() { apt-get -o DPkg::Lock::Timeout=300 install -y -qq slurm-wlm munge >/dev/null; }
  apt_install || { apt-get -o DPkg::Lock::Timeout=300 update -qq && apt_install; }
fi

# --- munge ----------------------------------------------------------------------------------------------------
# Debian's munge package makes a key when installed (mode 600); this one is for a host whose key is gone.
KEY=/etc/munge/munge.key
if [[ ! -s "$KEY" ]]; then
  log "creating the munge key $KEY"
  install -d -o munge -g munge -m 700 /etc/munge
  mungekey --create --keyfile="$KEY"
  chown munge:munge "$KEY"
  chmod 400 "$KEY"
fi

munge_answers() { munge -n 2>/dev/null | unmunge >/dev/null 2>&1; }
mkdir -p "$DIR"
if ! munge_answers; then
  log "starting munged as user munge"
  # Debian's unit would make these (RuntimeDirectory=munge); without systemd they are ours to make.
  install -d -o munge -g munge -m 755 /run/munge
  install -d -o munge -g munge -m 700 /var/log/munge /var/lib/munge
  detached runuser -u munge -- munged
  # slurm-down.sh stops munged only when this file says that this script started it.
  echo /run/munge/munged.pid >"$DIR/munged.started"
  for _ in $(seq 1 50); do
    munge_answers && break
    sleep 0.2
  done
  munge_answers || {
    tail -n 20 /var/log/munge/munged.log >&2 || true
    die "munged does not answer (munge -n | unmunge); its log is above"
  }
fi

# --- slurm.conf -----------------------------------------------------------------------------------------------
NODE="$(hostname -s)"
mkdir -p "$DIR/state" "$DIR/spool" "$DIR/log" "$DIR/run"

# slurmd's own view of this machine (CPUs and their layout, memory in MB): the node line must not claim more than
# slurmd measures, or slurmctld drains the node ("Low RealMemory", "Low socket*core*thread count").
hardware="$(slurmd -C | head -n 1)"
field() { sed -n "s/.*\\b$1=\\([0-9]*\\).*/\\1/p" <<<"$hardware"; }
cpus="$(field CPUs)"
boards="$(field Boards)"
sockets="$(field SocketsPerBoard)"
cores="$(field CoresPerSocket)"
threads="$(field ThreadsPerCore)"
memory="$(field RealMemory)"
[[ -n "$cpus" && -n "$memory" ]] || die "cannot read CPUs and RealMemory from \`slurmd -C\`: $hardware"
# Headroom: a tenth of the memory (at least 1 GiB) stays with the daemons, Docker and the machine's other users,
# and slurmd's measure moves a little between boots (a node claiming more than measured is drained).
headroom=$((memory / 10 > 1024 ? memory / 10 : 1024))
real_memory=$((memory - headroom))
node_line="NodeName=$NODE CPUs=$cpus Boards=$boards SocketsPerBoard=$sockets CoresPerSocket=$cores"
node_line+=" ThreadsPerCore=$threads RealMemory=$real_memory State=UNKNOWN"

# NVIDIA GPUs: one gres.conf line per device file, so that `sbatch --gres=gpu:N` allocates them and sets
# CUDA_VISIBLE_DEVICES in the job. The tests cannot exercise it: the machines that run them have no GPU
# (/dev/nvidia* absent). It was tried once by hand with two stand-in character devices named nvidia0/1 in place of
# /dev's: sinfo showed gpu:2, --gres=gpu:2 ran with CUDA_VISIBLE_DEVICES=0,1, --gres=gpu:3 was refused; never with
# real GPUs. With task/none nothing fences a job from the GPUs it was not given.
# In numeric order (nvidia2 before nvidia10, which a plain glob would swap).
mapfile -t gpus < <(compgen -G '/dev/nvidia[0-9]*' | sort -V || true)
gres_types=""
if ((${#gpus[@]} > 0)); then
  gres_types="GresTypes=gpu"
  node_line+=" Gres=gpu:${#gpus[@]}"
  {
    echo "$MARKER"
    for dev in "${gpus[@]}"; do echo "NodeName=$NODE Name=gpu File=$dev"; done
  } >"$DIR/gres.conf.new"
  mv "$DIR/gres.conf.new" "$DIR/gres.conf"
else
  rm -f "$DIR/gres.conf"
fi

cat >"$DIR/slurm.conf.new" <<EOF
$MARKER
ClusterName=vsnap
SlurmctldHost=$NODE
AuthType=auth/munge
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
# proctrack/linuxproc finds a job's processes by walking the process tree from its slurmstepd: it needs nothing
# from the host. proctrack/cgroup needs a cgroup.conf and a cgroup tree of Slurm's own: 22.05's cgroup/v2 plugin
# relies on systemd to delegate one (PID 1 is not systemd on these machines), and on cgroup v1 hosts (these are) Slurm
# would make its tree in the controllers that Docker and the other engineers' containers use. The cost: a process
# that leaves the tree (setsid plus a double fork) escapes scancel; the harness's shards do not daemonize, and the
# containers they start are dockerd's children under either plugin (the harness removes them itself).
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
# Batch jobs are scheduled in a pass at most every batch_sched_delay seconds (default 3), so that bursts of sbatch
# cost one pass: on a one-node cluster of a few jobs that is only latency (every array wave, every dependent job).
SchedulerParameters=batch_sched_delay=0
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
$gres_types
# A cancelled job's processes get SIGKILL this many seconds after SIGTERM: Slurm's default, 30. A cancelled shard
# (scripts/slurm/qualify.sh) takes SIGTERM as an interrupt and removes its lanes (containers) in that time.
KillWait=30
# A finished job stays visible to \`scontrol show job\` this long (no slurmdbd: sacct has no records).
MinJobAge=300
ReturnToService=2
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
$node_line
PartitionName=$PARTITION Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF

conf_changed=0
if ! cmp -s "$DIR/slurm.conf.new" "$CONF"; then
  conf_changed=1
  mv "$DIR/slurm.conf.new" "$CONF"
  log "wrote $CONF ($node_line${gres_types:+, ${#gpus[@]} GPUs})"
else
  rm -f "$DIR/slurm.conf.new"
fi

# /etc/slurm/slurm.conf: ours to (re)link only when absent or carrying the marker (a link whose target is gone, such
# as one to a removed state directory, configures nothing and counts as absent).
use_slurm_conf_env=1
if [[ ! -e "$ETC_CONF" ]] || head -n 1 "$ETC_CONF" | grep -q "^$MARKER_PREFIX"; then
  mkdir -p /etc/slurm
  ln -sfn "$CONF" "$ETC_CONF"
  use_slurm_conf_env=0
else
  log "$ETC_CONF exists and was not written by this script: left alone; clients need SLURM_CONF=$CONF"
fi

# --- daemons --------------------------------------------------------------------------------------------------
# alive NAME: the PID in $DIR/run/NAME.pid runs NAME (not a reused PID).
alive() {
  local pid
  pid="$(cat "$DIR/run/$1.pid" 2>/dev/null)" || return 1
  [[ -n "$pid" && "$(cat "/proc/$pid/comm" 2>/dev/null)" == "$1" ]]
}
stop() {
  local pid
  alive "$1" || return 0
  pid="$(cat "$DIR/run/$1.pid")"
  kill -TERM "$pid"
  for _ in $(seq 1 100); do
    [[ -d "/proc/$pid" ]] || return 0
    sleep 0.1
  done
  die "$1 (PID $pid) did not stop within 10 s of SIGTERM"
}

for daemon in slurmctld slurmd; do
  if ! alive "$daemon"; then
    # Another cluster's daemon on this host would hold the ports (6817/6818) that ours needs.
    others="$(pgrep -x "$daemon" || true)"
    [[ -z "$others" ]] || die "a $daemon not started by this script runs (PID ${others//$'\n'/ }): stop it first"
  fi
done

if ((conf_changed)) && { alive slurmctld || alive slurmd; }; then
  log "the configuration changed: restarting slurmd and slurmctld (job state is kept)"
  stop slurmd
  stop slurmctld
fi

export SLURM_CONF="$CONF"
if alive slurmctld; then
  log "slurmctld already running (PID $(cat "$DIR/run/slurmctld.pid"))"
else
  log "starting slurmctld"
  detached slurmctld -f "$CONF"
fi
slurmd_started_at=""
if alive slurmd; then
  log "slurmd already running (PID $(cat "$DIR/run/slurmd.pid"))"
else
  log "starting slurmd"
  slurmd_started_at="$(date +%s)"
  detached slurmd -f "$CONF"
fi

# The node takes jobs once slurmd has registered with slurmctld. States with a suffix (idle*, idle~, drained, ...)
# are not ready; allocated or mixed is a node that is up and runs jobs already (this script run again). A restarted
# slurmctld recovers the node's last state (idle) from its state files before slurmd has said a word: the slurmd
# started here must have registered too (its start time, as slurmctld knows it, is not older than ours).
registered() {
  [[ -z "$slurmd_started_at" ]] && return 0
  local known
  known="$(scontrol show node "$NODE" 2>/dev/null | grep -o 'SlurmdStartTime=[^ ]*' | cut -d= -f2)"
  [[ -n "$known" && "$known" != None ]] && (($(date -d "$known" +%s) >= slurmd_started_at))
}
ready() {
  case "$state" in
    idle | mixed | allocated | completing) registered ;;
    *) return 1 ;;
  esac
}
deadline=$((SECONDS + UP_TIMEOUT_S))
state=""
while ((SECONDS < deadline)); do
  state="$(sinfo -h -N -n "$NODE" -o '%T' 2>/dev/null | head -n 1 || true)"
  ready && break
  sleep 0.5
done
if ! ready; then
  reason="$(sinfo -h -N -n "$NODE" -o '%E' 2>/dev/null || true)"
  [[ -z "$state" || "$reason" != none ]] || reason="slurmd has not registered since it was started"
  for daemon in slurmctld slurmd; do
    log "last lines of $DIR/log/$daemon.log:"
    tail -n 15 "$DIR/log/$daemon.log" >&2 || true
  done
  die "node $NODE is not idle after ${UP_TIMEOUT_S} s (state: '${state:-no answer from slurmctld}'${reason:+, reason: $reason})"
fi

log "node $NODE $state: $cpus CPUs, RealMemory=$real_memory MB${gres_types:+, Gres=gpu:${#gpus[@]}}, partition $PARTITION"
if ((use_slurm_conf_env)); then
  log "use it from another shell with: export SLURM_CONF=$CONF"
else
  log "use it from any shell: sbatch, squeue, scancel, sinfo ($ETC_CONF -> $CONF); stop: scripts/slurm-down.sh"
fi
