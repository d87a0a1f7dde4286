#!/usr/bin/env bash
# Allreduce on this machine's GPUs with the NCCL backend, through poolrun (--pool local), twice:
# with poolrun's NCCL tuner plugin and without it (--tuner off), both tables printed and kept in
# BUILD/bench/. For a machine with a GPU; on one without, it says so and exits 0.
#   scripts/bench-allreduce-gpu.sh [BUILD_DIR (build)] [RANKS (every GPU)] [-- BENCH OPTIONS]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
shift || true
ranks=${1:-}
[ $# -gt 0 ] && shift
[ "${1:-}" = "--" ] && shift
options=("$@")
[ ${#options[@]} -eq 0 ] && options=(-b 8 -e 1G -f 2 -n 20 -w 5)
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "bench-allreduce-gpu: no GPU on this machine (nvidia-smi -L fails): nothing to measure"
  exit 0
fi
[ -n "$ranks" ] || ranks=$(nvidia-smi -L | grep -c '^GPU')
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
out=$build/bench
mkdir -p "$out"
bench=$build/examples/01-allreduce-bench/poolrun-allreduce-bench
for tuner in on off; do
  echo "== NCCL backend, $ranks GPUs, tuner $tuner"
  "$build/launcher/poolrun" -n "$ranks" --tuner "$tuner" "$bench" --backend nccl "${options[@]}" \
    --json "$out/allreduce-gpu-tuner-$tuner.json" | tee "$out/allreduce-gpu-tuner-$tuner.txt"
  grep -q '^# Out of bounds values : 0 OK' "$out/allreduce-gpu-tuner-$tuner.txt"
done
echo "== busbw (GB/s) per size: tuner on | tuner off"
paste <(grep -E '^ +[0-9]' "$out/allreduce-gpu-tuner-on.txt" | awk '{print $1, $8}') \
      <(grep -E '^ +[0-9]' "$out/allreduce-gpu-tuner-off.txt" | awk '{print $8}') |
  awk '{printf "%12s B  %8s | %8s\n", $1, $2, $3}'
