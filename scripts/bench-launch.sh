#!/usr/bin/env bash
# Launch overhead: `poolrun --pool sim:` against bare mpirun started by hand with the same hosts,
# agent, rankfile and ranks, running a trivial program; alternating, in one run. Prints the times
# and the ratio. Usage: scripts/bench-launch.sh [RANKS (8)] [ROUNDS (10)]
set -euo pipefail
cd "$(dirname "$0")/.."
ranks=${1:-8}
rounds=${2:-10}
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export POOLRUN_STATE_DIR=$(mktemp -d)
trap 'rm -rf "$POOLRUN_STATE_DIR"' EXIT
poolrun=build/launcher/poolrun
cluster=clusters/sim-ib.toml
per_node=$(( ranks < 8 ? ranks : 8 ))
# The job directory of a dry run holds the hostfile and the mapped rankfile bare mpirun gets.
$poolrun --pool sim:$cluster -n "$ranks" --gpus-per-node "$per_node" --job-dir "$POOLRUN_STATE_DIR/job" --dry-run /bin/true >/dev/null
agent=$(realpath build/launcher/poolrun-sim-agent)
bare=(mpirun -np "$ranks" --hostfile "$POOLRUN_STATE_DIR/job/hostfile" --rankfile "$POOLRUN_STATE_DIR/job/rankfile.mpi"
      --mca plm_rsh_agent "$agent" --mca pml ob1 --mca btl self,tcp --mca btl_tcp_if_include lo
      --mca oob_tcp_if_include lo --mca mpi_yield_when_idle 1 /bin/true)
now() { date +%s%N; }
tp=0; tb=0
for i in $(seq "$rounds"); do
  t0=$(now); $poolrun --pool sim:$cluster -n "$ranks" --gpus-per-node "$per_node" --tuner off /bin/true; t1=$(now)
  PMIX_MCA_gds=hash "${bare[@]}"; t2=$(now)
  tp=$((tp + t1 - t0)); tb=$((tb + t2 - t1))
done
awk -v p="$tp" -v b="$tb" -v n="$rounds" -v r="$ranks" 'BEGIN {
  printf "ranks %d, %d rounds: poolrun %.0f ms, bare mpirun %.0f ms per launch, ratio %.3f (%.1f%% extra)\n",
         r, n, p / n / 1e6, b / n / 1e6, p / b, (p / b - 1) * 100 }'
