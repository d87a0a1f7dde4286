#!/usr/bin/env bash
# Installs the dependencies, builds poolrun and runs its main job on the embedded default: this
# machine's topology, then a 16-rank job on the simulated cluster of two 8-GPU InfiniBand nodes
# (clusters/sim-ib.toml), where every rank prints the GPU, NIC and cores poolrun gave it.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$(nproc)" --target poolrun poolrun-rank poolrun-sim-agent poolrun_nccl_tuner
echo "== poolrun topo (this machine)"
build/launcher/poolrun topo
echo
echo "== poolrun --pool sim:clusters/sim-ib.toml -n 16 (two simulated 8-GPU nodes)"
if [ "$(id -u)" -eq 0 ]; then
  # Open MPI refuses root unless told; this demo says so explicitly (poolrun never does).
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
export POOLRUN_STATE_DIR=${POOLRUN_STATE_DIR:-$PWD/build/state}
build/launcher/poolrun --pool sim:clusters/sim-ib.toml -n 16 -- sh -c \
  'echo "rank $RANK on $POOLRUN_NODE: CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES NCCL_IB_HCA=$NCCL_IB_HCA GDR=$NCCL_NET_GDR_LEVEL planned cores $POOLRUN_PLANNED_CPUSET, bound to $(grep Cpus_allowed_list /proc/self/status | cut -f2)"' \
  | sort -n -k2
