#!/usr/bin/env bash
# Allreduce in CI: poolrun-allreduce-bench through poolrun on the simulated cluster (2 nodes, 4 and 8
# ranks, 8 B to 64 MiB, MPI backend), every result checked (#wrong must be 0), the JSON kept in
# BUILD/bench/ (the CI artifact), and in the same run the runtime's MPI backend timed against a
# plain MPI_Allreduce loop of the same sizes and ranks (--baseline), printed as a ratio.
# Few iterations: 8 ranks share this machine's cores over loopback TCP, so the figures show
# correctness and overhead, not a network's bandwidth.
#   scripts/bench-allreduce.sh [BUILD_DIR (build)]
#   POOLRUN_BENCH_ITERS (1), POOLRUN_BENCH_ROUNDS (1: more rounds, the fastest kept, steady the ratio),
#   POOLRUN_BENCH_MAX (64M)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
iters=${POOLRUN_BENCH_ITERS:-1}
rounds=${POOLRUN_BENCH_ROUNDS:-1}
max=${POOLRUN_BENCH_MAX:-64M}
out=$build/bench
mkdir -p "$out"
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
state=$(mktemp -d)
trap 'rm -rf "$state"' EXIT
export POOLRUN_STATE_DIR=$state

start=$(date +%s)
for ranks in 4 8; do
  per_node=$((ranks / 2))
  echo "== allreduce, $ranks ranks on 2 simulated nodes ($per_node per node), 8 B to $max"
  # The bench exits 1 when any element is wrong; poolrun passes that on.
  "$build/launcher/poolrun" --pool sim:clusters/sim-ib.toml -n "$ranks" --gpus-per-node "$per_node" --tuner off \
    "$build/examples/01-allreduce-bench/poolrun-allreduce-bench" -b 8 -e "$max" -f 2 -n "$iters" -w 0 \
    --baseline --rounds "$rounds" --json "$out/allreduce-$ranks.json" | tee "$out/allreduce-$ranks.txt"
  grep -q '^# Out of bounds values : 0 OK' "$out/allreduce-$ranks.txt" || {
    echo "bench-allreduce: $ranks ranks: wrong results (see $out/allreduce-$ranks.txt)" >&2
    exit 1
  }
done
echo "== runtime (MPI backend) against plain MPI_Allreduce, sizes of 1 MiB and above:"
for ranks in 4 8; do
  grep '^# Overhead at 1 MiB' "$out/allreduce-$ranks.txt" | sed "s/^# /   $ranks ranks: /"
done
echo "== results in $out/allreduce-{4,8}.json ($(($(date +%s) - start)) s)"
