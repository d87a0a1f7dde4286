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
      --mca plm_rsh_agent "$agent" --mca if_base_do_not_resolve 1 --mca pml ob1 --mca btl self,tcp --mca btl_tcp_if_include lo
      --mca oob_tcp_if_include lo --mca mpi_yield_when_idle 1 /bin/true)
now() { date +%s%N; }
times=$(mktemp)
for i in $(seq "$rounds"); do
  t0=$(now); $poolrun --pool sim:$cluster -n "$ranks" --gpus-per-node "$per_node" --tuner off /bin/true; t1=$(now)
  PMIX_MCA_gds=hash PMIX_MCA_pif_base_do_not_resolve=1 "${bare[@]}"; t2=$(now)
  echo "$((t1 - t0)) $((t2 - t1))" >> "$times"
done
# Medians: the machine is shared and single launches vary by 2x. Each round also gives a paired
# difference (poolrun minus the bare launch right after it): its median is steadier across runs
# than the ratio of the two medians when the machine's speed drifts during a run.
sort -n -k1 "$times" | awk -v n="$rounds" 'NR == int((n + 1) / 2) { print $1 }' > "$times.p"
sort -n -k2 "$times" | awk -v n="$rounds" 'NR == int((n + 1) / 2) { print $2 }' > "$times.b"
awk '{ print $1 - $2 }' "$times" | sort -n | awk -v n="$rounds" 'NR == int((n + 1) / 2) { print $1 }' > "$times.d"
awk -v p="$(cat "$times.p")" -v b="$(cat "$times.b")" -v d="$(cat "$times.d")" -v n="$rounds" -v r="$ranks" 'BEGIN {
  printf "ranks %d, %d alternating rounds, medians: poolrun %.0f ms, bare mpirun %.0f ms, ratio %.3f (%.1f%% extra); median paired difference %.0f ms (%.1f%% of bare)\n",
         r, n, p / 1e6, b / 1e6, p / b, (p / b - 1) * 100, d / 1e6, d / b * 100 }'
rm -f "$times" "$times.p" "$times.b" "$times.d"
