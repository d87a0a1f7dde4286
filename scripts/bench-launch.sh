#!/usr/bin/env bash
# Launch overhead: `poolrun --pool sim:` against bare mpirun started by hand with the same hosts,
# agent, rankfile and ranks, running a trivial program; alternating, in one run. Prints the times
# and the ratio. Usage: scripts/bench-launch.sh [RANKS (8)] [ROUNDS (10)] [PROGRAM [ARGS...] (/bin/true)]
# /bin/true measures the launch alone; an MPI program (build/tests/launcher/rank_report: MPI_Init,
# one allreduce, MPI_Finalize) measures what a job's start costs with and without poolrun.
set -euo pipefail
cd "$(dirname "$0")/.."
ranks=${1:-8}
rounds=${2:-10}
shift $(( $# < 2 ? $# : 2 ))
if ! [[ $ranks =~ ^[1-9][0-9]*$ && $rounds =~ ^[0-9]+$ ]] || (( rounds < 2 )); then
  echo "bench-launch: RANKS must be a positive number and ROUNDS at least 2 (got '$ranks' and '$rounds')" >&2
  echo "usage: scripts/bench-launch.sh [RANKS (8)] [ROUNDS (10)] [PROGRAM [ARGS...] (/bin/true)]" >&2
  exit 2
fi
program=("${@:-/bin/true}")
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export POOLRUN_STATE_DIR=$(mktemp -d)
times=$(mktemp)
trap 'rm -rf "$POOLRUN_STATE_DIR" "$times"' EXIT
poolrun=build/launcher/poolrun
cluster=clusters/sim-ib.toml
per_node=$(( ranks < 8 ? ranks : 8 ))
# The job directory of a dry run holds the hostfile and the mapped rankfile bare mpirun gets.
$poolrun --pool sim:$cluster -n "$ranks" --gpus-per-node "$per_node" --job-dir "$POOLRUN_STATE_DIR/job" --dry-run /bin/true >/dev/null
agent=$(realpath build/launcher/poolrun-sim-agent)
bare=(mpirun -np "$ranks" --hostfile "$POOLRUN_STATE_DIR/job/hostfile" --rankfile "$POOLRUN_STATE_DIR/job/rankfile.mpi"
      --mca plm_rsh_agent "$agent" --mca if_base_do_not_resolve 1 --mca pml ob1 --mca btl self,tcp --mca btl_tcp_if_include lo
      --mca oob_tcp_if_include lo --mca mpi_yield_when_idle 1 "${program[@]}")
now() { date +%s%N; }
launch_poolrun() { $poolrun --pool sim:$cluster -n "$ranks" --gpus-per-node "$per_node" "${program[@]}"; }
launch_bare() { PMIX_MCA_gds=hash PMIX_MCA_pif_base_do_not_resolve=1 "${bare[@]}"; }
# poolrun as users run it (its defaults: the tuner's configuration is written and exported). The
# two launches alternate which goes first, so that neither always follows the other's exit.
for i in $(seq "$rounds"); do
  if (( i % 2 )); then
    t0=$(now); launch_poolrun; t1=$(now); launch_bare; t2=$(now)
    echo "$((t1 - t0)) $((t2 - t1))" >> "$times"
  else
    t0=$(now); launch_bare; t1=$(now); launch_poolrun; t2=$(now)
    echo "$((t2 - t1)) $((t1 - t0))" >> "$times"
  fi
done
# Medians: the machine is shared and single launches vary by 2x. Each round also gives a paired
# difference (poolrun minus the bare launch of the same round): its median is steadier across
# runs than the ratio of the two medians when the machine's speed drifts during a run; its
# quartiles show the spread.
# Quartiles as Python's statistics.quantiles computes them (the "exclusive" method).
stat() {  # stat COLUMN K: the K-th quartile (2: the median) of COLUMN, in ms
  sort -n -k"$1" "$times" | awk -v c="$1" -v k="$2" '{ x[NR] = $c } END {
    p = (NR + 1) * k / 4; j = int(p)
    if (j < 1) { print x[1] / 1e6; exit }
    if (j >= NR) { print x[NR] / 1e6; exit }
    print (x[j] + (p - j) * (x[j + 1] - x[j])) / 1e6 }'
}
awk '{ print $1, $2, $1 - $2 }' "$times" > "$times.d" && mv "$times.d" "$times"
p=$(stat 1 2) b=$(stat 2 2) d=$(stat 3 2) q1=$(stat 3 1) q3=$(stat 3 3)
awk -v p="$p" -v b="$b" -v d="$d" -v q1="$q1" -v q3="$q3" -v n="$rounds" -v r="$ranks" -v prog="${program[0]##*/}" 'BEGIN {
  printf "%s, ranks %d, %d rounds alternating the order, medians: poolrun %.0f ms, bare mpirun %.0f ms, ratio %.3f (%.1f%% extra); median paired difference %.0f ms (%.1f%% of bare), quartiles %.0f and %.0f ms\n",
         prog, r, n, p, b, p / b, (p / b - 1) * 100, d, d / b * 100, q1, q3 }'
