#!/usr/bin/env bash
# A real single-machine Slurm for the tests: munged, slurmctld and slurmd from Debian's packages,
# everything (configuration, keys, sockets, state, logs, the fake GPU devices) under one folder,
# on loopback, on free ports, so that it never touches the machine's own /etc/slurm or munge.
#
#   scripts/slurm-test-cluster.sh start DIR [GPUS]   start (GPUS fake GPUs per node, default 4); prints
#                                                    "export SLURM_CONF=DIR/etc/slurm.conf"
#   scripts/slurm-test-cluster.sh stop DIR           stop every daemon started in DIR; idempotent
#   scripts/slurm-test-cluster.sh status DIR         0 when the node is idle and usable
#   scripts/slurm-test-cluster.sh fixture DIR        start for a CTest fixture: where Slurm cannot
#                                                    start, write why to DIR/skip-reason and exit 0
#                                                    (the tests then skip with that reason)
#
# Two nodes, sn01 and sn02 (NodeAddr 127.0.0.1, one slurmd each on its own port), names that do not
# resolve, so that Open MPI's mpirun treats them as remote nodes and starts its daemons there through
# srun, as on a cluster. (Two slurmds on one host share /tmp: Slurm's PMIx plugin then refuses a
# step with tasks on both, so srun-launched MPI jobs in the tests stay on one node.)
# Its GPU GRES is backed by character devices made with mknod (major 195, as NVIDIA's) and listed
# in gres.conf as File=; Slurm then sets CUDA_VISIBLE_DEVICES and SLURM_STEP_GPUS as on a real
# node. Selection is cons_tres; process tracking linuxproc and no task plugin, since a container
# rarely offers the cgroups that the cgroup plugins need.
#
# `start` exits 77 (the CTest skip code) with one line saying why when Slurm cannot run here: the
# packages are missing (scripts/setup-deps.sh installs them), mknod is refused, or a daemon does
# not come up (its log is shown).
set -euo pipefail

cmd=${1:-}
dir=${2:-}
if [ -z "$cmd" ] || [ -z "$dir" ]; then
  echo "usage: $0 start|fixture|stop|status DIR [GPUS]" >&2
  exit 2
fi

skip() {
  echo "slurm-test-cluster: SKIP: $*" >&2
  if [ "$cmd" = fixture ]; then
    mkdir -p "$dir" && echo "$*" >"$dir/skip-reason"
    exit 0
  fi
  exit 77
}

# The pids of `names` (pgrep -x patterns) that run against this folder's cluster (SLURM_CONF).
cluster_processes() {
  local pid
  [ -f "$dir/etc/slurm.conf" ] || return 0
  for pid in $(pgrep -x "$1" 2>/dev/null || true); do
    if tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "SLURM_CONF=$dir/etc/slurm.conf"; then
      echo "$pid"
    fi
  done
}

stop_all() {
  # Clients of this cluster still running (an salloc whose job a test left): ended first, while
  # slurmctld still answers them; one left after the daemons would retry it for ever, spinning.
  local client
  for client in $(cluster_processes 'salloc|srun|sbatch'); do kill -TERM "$client" 2>/dev/null || true; done
  # Only the daemons this folder started, by the pids they wrote: all asked at once, then waited for.
  local pids=() pid pidfile
  for pidfile in "$dir"/run/*.pid; do
    [ -f "$pidfile" ] || continue
    pid=$(cat "$pidfile" 2>/dev/null || true)
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
      kill -TERM "$pid" 2>/dev/null || true
      pids+=("$pid")
    fi
  done
  for _ in $(seq 1 100); do
    local alive=0
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ $alive -eq 0 ] && break
    sleep 0.05
  done
  for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  rm -f "$dir"/run/*.pid
  # slurmstepd processes of jobs that were still running (their slurmd is gone), and any client
  # that did not take the TERM.
  for pid in $(cluster_processes 'slurmstepd|salloc|srun|sbatch'); do kill -KILL "$pid" 2>/dev/null || true; done
}

free_port() {
  local used port
  used=$(ss -Htan 2>/dev/null | awk '{print $4}' | sed 's/.*://' | sort -u)
  for _ in $(seq 1 200); do
    port=$((20000 + RANDOM % 30000))
    if ! grep -qx "$port" <<<"$used" && ! grep -qx "$port" <<<"${taken:-}"; then
      taken="${taken:-}"$'\n'"$port"
      echo "$port"
      return
    fi
  done
  echo 6817
}

case "$cmd" in
  stop)
    stop_all
    exit 0
    ;;
  status)
    export SLURM_CONF="$dir/etc/slurm.conf"
    states=$(sinfo -h -N -o '%N=%t' 2>/dev/null | sort -u | tr '\n' ' ' || true)
    [ "$states" = "sn01=idle sn02=idle " ] && exit 0
    echo "node states: ${states:-unknown}" >&2
    exit 1
    ;;
  start | fixture) rm -f "$dir/skip-reason" ;;
  *)
    echo "usage: $0 start|fixture|stop|status DIR [GPUS]" >&2
    exit 2
    ;;
esac

gpus=${3:-4}
for bin in munged slurmctld slurmd salloc srun scontrol squeue scancel sinfo; do
  command -v "$bin" >/dev/null || skip "$bin is not installed (scripts/setup-deps.sh installs slurm-wlm and munge)"
done
[ "$(id -u)" -eq 0 ] || skip "slurmd must run as root to start jobs (run the tests as root)"

stop_all
dir=$(mkdir -p "$dir" && cd "$dir" && pwd)
rm -rf "${dir:?}"/{etc,munge,state,spool,log,run,dev}
mkdir -p "$dir"/{etc,munge,state,spool,log,run,dev}
chmod 700 "$dir/munge"

for i in $(seq 0 $((gpus - 1))); do
  mknod "$dir/dev/nvidia$i" c 195 "$i" 2>/dev/null || skip "mknod of a character device is refused here"
done

# munge: its own key, socket, pid, seed and log files.
dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
chmod 400 "$dir/munge/munge.key"
socket="$dir/munge/munge.socket"
munged --force --key-file="$dir/munge/munge.key" --socket="$socket" --pid-file="$dir/run/munged.pid" \
  --seed-file="$dir/munge/munged.seed" --log-file="$dir/log/munged.log" 2>"$dir/log/munged.err" ||
  skip "munged does not start: $(tail -n1 "$dir/log/munged.err" "$dir/log/munged.log" 2>/dev/null | tr '\n' ' ')"

host=$(hostname -s)
ctld_port=$(free_port)
port1=$(free_port)
port2=$(free_port)
cpus=$(nproc)
cat >"$dir/etc/slurm.conf" <<EOF
# Generated by scripts/slurm-test-cluster.sh for the tests: one node, loopback, fake GPUs.
ClusterName=poolruntest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$socket
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/slurmd-%n
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd-%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
MinJobAge=2
KillWait=2
WaitTime=0
SchedulerParameters=sched_interval=2
MessageTimeout=10
NodeName=sn01 NodeAddr=127.0.0.1 NodeHostname=$host Port=$port1 CPUs=$cpus Gres=gpu:$gpus RealMemory=1 State=UNKNOWN
NodeName=sn02 NodeAddr=127.0.0.1 NodeHostname=$host Port=$port2 CPUs=$cpus Gres=gpu:$gpus RealMemory=1 State=UNKNOWN
PartitionName=debug Nodes=sn[01-02] Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
cat >"$dir/etc/gres.conf" <<EOF
NodeName=sn[01-02] Name=gpu File=$dir/dev/nvidia[0-$((gpus - 1))]
EOF
cat >"$dir/etc/cgroup.conf" <<EOF
CgroupPlugin=autodetect
ConstrainDevices=no
EOF

export SLURM_CONF="$dir/etc/slurm.conf"
slurmctld -i 2>"$dir/log/slurmctld.err" || skip "slurmctld does not start: $(tail -n3 "$dir/log/slurmctld.log" 2>/dev/null | tr '\n' ' ')"
for node in sn01 sn02; do
  slurmd -N $node 2>"$dir/log/slurmd-$node.err" ||
    skip "slurmd does not start: $(tail -n3 "$dir/log/slurmd-$node.log" 2>/dev/null | tr '\n' ' ')"
done

# Both nodes idle (sinfo -N prints one line per node and partition).
for _ in $(seq 1 100); do
  states=$(sinfo -h -N -o '%N=%t' 2>/dev/null | sort -u | tr '\n' ' ' || true)
  [ "$states" = "sn01=idle sn02=idle " ] && break
  sleep 0.2
done
if [ "$states" != "sn01=idle sn02=idle " ]; then
  reason=$(scontrol show node 2>/dev/null | grep -o 'Reason=.*' | head -n1 || true)
  msg="nodes are '${states:-unknown}', not idle ${reason} $(tail -n2 "$dir/log/slurmd-sn01.log" 2>/dev/null | tr '\n' ' ')"
  stop_all
  skip "$msg"
fi
echo "export SLURM_CONF=$SLURM_CONF"
