#!/usr/bin/env bash
# slurm-setup.sh starts a real Slurm cluster on this one host for the tests
# and benchmarks: munged, slurmctld and four slurmd (node1..node4, each its
# own daemon with its own port), from Debian's packages. Run as root.
#
#   bash scripts/slurm-setup.sh         install (once), configure, start, wait until idle
#   bash scripts/slurm-setup.sh stop    cancel every job, stop the daemons it started
#
# It is idempotent: when the daemons already answer with this configuration,
# it only prints the facts. Everything it makes lives in $FERRY_SLURM_DIR
# (config, state, spool, pid files) and $FERRY_SLURM_LOG (logs); /etc/slurm
# is not touched, so clients find the cluster through
#   export SLURM_CONF=/var/lib/ferry-slurm/slurm.conf
# (internal/testutil.RequireSlurm does that for the tests).
#
# Partitions: debug (Default, node1..node3) and small (node4 alone), so a
# test can fill small and see a job pend behind it whatever runs in debug.
# Every job on small takes the whole node (OverSubscribe=EXCLUSIVE), so a
# target on small runs one job at a time, as the conformance suite needs.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive

dir=/var/lib/ferry-slurm
logdir=/var/log/ferry-slurm
conf=$dir/slurm.conf
export SLURM_CONF=$conf
nodes=4
ctld_port=16817 # node N listens on ctld_port+N; away from Slurm's defaults (6817/6818)

say() { echo "slurm-setup: $*"; }
die() { echo "slurm-setup: $*" >&2; exit 1; }

# alive reports whether the pid in pid file $1 is a live process.
alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

# stop_pidfiles ends the processes named in the pid files given, all at
# once (each takes about 2 s to leave after SIGTERM), then SIGKILLs any
# left after 10 s.
stop_pidfiles() {
  local f pids=()
  for f in "$@"; do
    [ -e "$f" ] || continue
    if alive "$f"; then
      say "stopping $(basename "$f" .pid) ($(cat "$f"))"
      pids+=("$(cat "$f")")
      kill "$(cat "$f")" 2>/dev/null || true
    fi
    rm -f "$f"
  done
  [ ${#pids[@]} -gt 0 ] || return 0
  local p left
  for _ in $(seq 50); do
    left=0
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && left=1; done
    [ "$left" = 1 ] || return 0
    sleep 0.2
  done
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
}

# stop_slurm cancels every job and stops slurmd and slurmctld.
stop_slurm() {
  if alive "$dir/run/slurmctld.pid"; then
    # Jobs first: a slurmstepd outlives its slurmd, so stopping only the
    # daemons would leave the jobs' processes behind.
    ids=$(squeue -h -o %i 2>/dev/null || true)
    if [ -n "$ids" ]; then
      say "cancelling jobs: $(echo $ids)"
      scancel $ids 2>/dev/null || true
      for _ in $(seq 75); do [ -z "$(squeue -h -o %i 2>/dev/null)" ] && break; sleep 0.2; done
    fi
  fi
  stop_pidfiles "$dir"/run/slurmd-*.pid
  stop_pidfiles "$dir/run/slurmctld.pid"
}

stop() {
  stop_slurm
  # munged only if this script started it (another user of munge keeps it).
  stop_pidfiles "$dir/run/munged.pid"
  say "stopped (state kept in $dir; remove it for a clean start)"
}

[ "$(id -u)" = 0 ] || die "run as root (it installs packages and starts daemons as root)"
case "${1:-start}" in
  start) ;;
  stop) stop; exit 0 ;;
  *) die "unknown argument '$1': use no argument (start) or 'stop'" ;;
esac

# write_conf prints the configuration for this host.
write_conf() {
  local host; host=$(hostname -s)
  cat <<EOF
# Written by scripts/slurm-setup.sh: a one-host test cluster for Ferry.
ClusterName=ferrytest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CryptoType=crypto/munge
MpiDefault=none
MailProg=/bin/true
# No cgroups here: processes are tracked through /proc, tasks not bound.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
# Schedule a batch job when it is submitted, not up to 3 s later (the
# default): 100 trivial jobs end at about 8 jobs/s instead of 3.
SchedulerParameters=batch_sched_delay=0
# Report the configured CPUs whatever the host has: four nodes share it.
SlurmdParameters=config_overrides
# Finished jobs stay visible to scontrol show job for an hour (no slurmdbd).
MinJobAge=3600
# Kept jobs count against MaxJobCount (10,000 by default): with an hour's
# worth kept, a few benchmark runs of 1,000 jobs each filled it and every
# sbatch was refused ("Resource temporarily unavailable") until jobs aged out.
MaxJobCount=100000
ReturnToService=2
KillWait=5
InactiveLimit=0
StateSaveLocation=$dir/ctld
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd-%n.pid
SlurmctldLogFile=$logdir/slurmctld.log
SlurmdLogFile=$logdir/slurmd-%n.log
EOF
  for n in $(seq "$nodes"); do
    echo "NodeName=node$n NodeHostname=$host NodeAddr=127.0.0.1 Port=$((ctld_port + n)) CPUs=2 State=UNKNOWN"
  done
  echo "PartitionName=debug Nodes=node[1-$((nodes - 1))] Default=YES MaxTime=INFINITE State=UP"
  echo "PartitionName=small Nodes=node$nodes MaxTime=INFINITE OverSubscribe=EXCLUSIVE State=UP"
}

# ready reports whether slurmctld answers and every node is up (idle, mixed,
# allocated or completing a job).
ready() {
  local out
  out=$(sinfo -h -N -o '%N %t' 2>/dev/null | sort -u) || return 1
  [ "$(echo "$out" | grep -cE ' (idle|mix|alloc|comp)$')" = "$nodes" ]
}

facts() {
  say "Slurm $(sinfo -V | awk '{print $2}') answers; SLURM_CONF=$conf"
  sinfo -o '%P %a %D %N %t' | sed 's/^/slurm-setup:   /'
  say "logs in $logdir; stop with: bash scripts/slurm-setup.sh stop"
  say "use it with: export SLURM_CONF=$conf"
}

want=$(write_conf)
# running reports whether munge answers and every daemon of ours is alive;
# a dead slurmd shows in sinfo only after SlurmdTimeout, so look at pids.
running() {
  munge -n 2>/dev/null | unmunge >/dev/null 2>&1 || return 1
  alive "$dir/run/slurmctld.pid" || return 1
  for n in $(seq "$nodes"); do alive "$dir/run/slurmd-node$n.pid" || return 1; done
}

if [ -f "$conf" ] && [ "$(cat "$conf")" = "$want" ] && running && ready; then
  facts
  exit 0
fi

# Debian's daemons and clients; the slurm-wlm metapackage would add some 28
# plugin and -dev packages that a one-host cluster does not use.
pkgs=()
command -v munged >/dev/null || pkgs+=(munge)
command -v slurmctld >/dev/null || pkgs+=(slurmctld)
command -v slurmd >/dev/null || pkgs+=(slurmd)
command -v sbatch >/dev/null || pkgs+=(slurm-client)
if [ ${#pkgs[@]} -gt 0 ]; then
  say "installing ${pkgs[*]} (apt-get)"
  if ! apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null; then
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null
  fi
fi

mkdir -p "$dir/ctld" "$dir/spool" "$dir/run" "$logdir"
for n in $(seq "$nodes"); do mkdir -p "$dir/spool/node$n"; done

# A changed configuration (or a half-started cluster) is restarted whole.
if [ -f "$conf" ] && [ "$(cat "$conf")" != "$want" ]; then
  say "configuration changed: restarting slurmctld and the slurmd's"
  stop_slurm
fi
echo "$want" >"$conf"

# munge first: every Slurm daemon authenticates through it.
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
  [ -s /etc/munge/munge.key ] || mungekey --create --keyfile=/etc/munge/munge.key
  chown munge:munge /etc/munge/munge.key && chmod 0400 /etc/munge/munge.key
  mkdir -p /run/munge /var/log/munge /var/lib/munge
  chown munge:munge /run/munge /var/log/munge /var/lib/munge
  chmod 0755 /run/munge
  say "starting munged"
  runuser -u munge -- munged
  for _ in $(seq 50); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.1; done
  munge -n | unmunge >/dev/null || die "munged does not answer; see /var/log/munge/munged.log"
  # munged (user munge) writes its pid file in /run/munge; a copy in ours
  # records that this script started it, so stop ends it and no other.
  cp /run/munge/munged.pid "$dir/run/munged.pid"
fi

if ! alive "$dir/run/slurmctld.pid"; then
  say "starting slurmctld"
  slurmctld -f "$conf" || die "slurmctld did not start; see $logdir/slurmctld.log"
fi
for n in $(seq "$nodes"); do
  alive "$dir/run/slurmd-node$n.pid" && continue
  say "starting slurmd node$n"
  slurmd -f "$conf" -N "node$n" || die "slurmd node$n did not start; see $logdir/slurmd-node$n.log"
done

for _ in $(seq 120); do ready && break; sleep 0.5; done
if ! ready; then
  # A node left down or drained by an earlier run is returned to service.
  scontrol update nodename="node[1-$nodes]" state=resume 2>/dev/null || true
  for _ in $(seq 20); do ready && break; sleep 0.5; done
fi
ready || { sinfo -N -l >&2 || true; die "the nodes are not idle after 60 s; see $logdir"; }
facts
