#!/usr/bin/env bash
# Installs every build and test dependency of poolrun from Debian's archive (Debian 12).
# Idempotent: quiet when everything is already there. CUDA/NCCL are not installed here; the build
# uses them when /usr/local/cuda exists and skips the GPU paths cleanly when it does not.
set -euo pipefail

packages=(
  cmake ninja-build g++ make pkg-config musl-tools
  libhwloc-dev hwloc
  libopenmpi-dev openmpi-bin libucx-dev
  libboost-program-options-dev libboost-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev libsimdjson-dev libjemalloc-dev libpugixml-dev libfmt-dev libsqlite3-dev libtomlplusplus-dev
  libcpp-httplib-dev
  clang libclang-rt-14-dev clang-format
  graphviz
  slurm-wlm munge libmunge-dev
  libssl-dev openssl dpkg-dev
  prometheus
  python3-torch
  chromium chromium-driver python3-selenium nodejs
  etcd-server etcd-client
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "setup-deps: installing ${missing[*]}" >&2
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# python3-torch (PyTorch 1.13, CPU, for /usr/bin/python3) runs examples/03-pytorch under poolrun,
# elastic leases included: about 180 packages, 2 minutes to install here (measured 2026-12-02).
# chromium, chromium-driver and python3-selenium (for /usr/bin/python3) run the dashboard's browser
# test (tests/pool/dashboard/): about 122 MB to download for the three (chromium 81 MB, its common
# files 32 MB, the driver 9 MB, Selenium 0.1 MB) and some 370 MB installed, plus their libraries
# (GTK and the like, most already here for other packages); on this machine they installed in 41 s
# together with two small packages (measured 2026-12-02, from /var/log/apt/history.log).
# nodejs runs the dashboard's failover logic outside the browser (pool/dashboard/ui/replicas.js,
# tests/pool/dashboard/replicas_test.mjs); already installed on this project's machines (2026-12-05).
# etcd-server and etcd-client (etcd 3.4: two static Go binaries, about 40 MB installed, no other
# package) run the tests of poold's etcd store and its replicas (docs/ha.md); the Debian service
# they enable is not needed and is disabled below.
# The prometheus package is here for its promtool (the tests run `promtool check metrics` on poold's
# /metrics); where systemd runs, it also starts a Prometheus server, which nothing needs.
if [[ " ${missing[*]} " == *" etcd-server "* ]] && [ -d /run/systemd/system ] && command -v systemctl >/dev/null; then
  $SUDO systemctl disable --now etcd >/dev/null 2>&1 || true
fi
if [[ " ${missing[*]} " == *" prometheus "* ]] && [ -d /run/systemd/system ] && command -v systemctl >/dev/null; then
  $SUDO systemctl disable --now prometheus >/dev/null 2>&1 || true
fi
