#!/usr/bin/env bash
# Installs the dependencies, builds poolrun and runs its main job on the embedded default: the
# topology of this machine, then of the HGX H100-style node that the project ships.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$(nproc)" --target poolrun
echo "== poolrun topo (this machine)"
build/launcher/poolrun topo
echo
echo "== poolrun topo --from topologies/hgx-h100-8gpu-8nic.xml"
build/launcher/poolrun topo --from topologies/hgx-h100-8gpu-8nic.xml
