#!/usr/bin/env bash
# Builds poolrun-rank for aarch64 (Grace Hopper and other Arm nodes) as runtime/CMakeLists.txt builds
# it, linked statically against musl, and runs it under qemu-user: the plan's variables, a binding,
# an error, the reaper. Not part of CI (it needs a cross compiler and arm64's musl); run it after
# changing runtime/src/core or runtime/src/rank_main.cpp.
#   apt-get install g++-aarch64-linux-gnu qemu-user
#   dpkg --add-architecture arm64 && apt-get update && apt-get install musl-dev:arm64
#   scripts/check-rank-aarch64.sh
set -euo pipefail
cd "$(dirname "$0")/.."
for tool in aarch64-linux-gnu-g++ qemu-aarch64; do
  command -v "$tool" >/dev/null || { echo "check-rank-aarch64: $tool is missing (apt-get install g++-aarch64-linux-gnu qemu-user)" >&2; exit 2; }
done
specs=/usr/lib/aarch64-linux-musl/musl-gcc.specs
[ -f "$specs" ] || { echo "check-rank-aarch64: $specs is missing (dpkg --add-architecture arm64; apt-get update; apt-get install musl-dev:arm64)" >&2; exit 2; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
src=runtime/src
aarch64-linux-gnu-g++ -std=c++20 -O2 -specs="$specs" -I"$src" -Itopo_probe/include -fno-exceptions -fno-rtti \
  -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wconversion -Wno-sign-conversion -Werror -static -nodefaultlibs \
  "$src"/rank_main.cpp "$src"/core/{rank_env,rank_info,binding,system}.cpp -lc -lgcc -o "$out/poolrun-rank"
file "$out/poolrun-rank" | grep -q "ARM aarch64.*statically linked" || { echo "check-rank-aarch64: $(file "$out/poolrun-rank")" >&2; exit 1; }
doc='{"schema":"poolrun.rank-env/1","sets":[{"A":"zero"},{"A":"caf\u00e9","POOLRUN_CPUSET":"0"}],"templates":[[0,1]],"runs":[[0,1,2,0]]}'
# shellcheck disable=SC2016  # expanded by the rank's shell, not this one
got=$(OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_SIZE=2 POOLRUN_RANK_ENV="$doc" qemu-aarch64 "$out/poolrun-rank" \
  sh -c 'echo "$A $RANK $WORLD_SIZE $POOLRUN_BOUND_CPUS"; grep Cpus_allowed_list /proc/self/status')
want=$'café 1 2 0\nCpus_allowed_list:\t0'
[ "$got" = "$want" ] || { echo "check-rank-aarch64: got '$got', want '$want'" >&2; exit 1; }
if err=$(qemu-aarch64 "$out/poolrun-rank" no-such-program 2>&1); then
  echo "check-rank-aarch64: a missing program ran" >&2; exit 1
fi
[[ $err == *"cannot run 'no-such-program': No such file or directory"* ]] || { echo "check-rank-aarch64: $err" >&2; exit 1; }
# The reaper (POOLRUN_REAP=1): the program's exit code passed through, its daemon ended. qemu-user
# refuses PR_SET_CHILD_SUBREAPER (EINVAL): there the reaper must say so and run the program as
# without it; on an aarch64 machine it must end the daemon.
pidfile="$out/daemon.pid"
set +e
reaped=$(POOLRUN_REAP=1 qemu-aarch64 "$out/poolrun-rank" sh -c "setsid sleep 100 & echo \$! > $pidfile; exit 3" 2>&1)
code=$?
set -e
[ "$code" = 3 ] || { echo "check-rank-aarch64: the reaper returned $code, want 3 ($reaped)" >&2; exit 1; }
if [[ $reaped == *"prctl(PR_SET_CHILD_SUBREAPER): Invalid argument"* ]]; then
  kill "$(cat "$pidfile")" 2>/dev/null || true
  echo "check-rank-aarch64: qemu-user has no PR_SET_CHILD_SUBREAPER: the reaper said so and ran the program"
elif kill -0 "$(cat "$pidfile")" 2>/dev/null; then
  echo "check-rank-aarch64: the reaper left the program's daemon running" >&2; exit 1
fi
echo "check-rank-aarch64: poolrun-rank for aarch64 ($(stat -c %s "$out/poolrun-rank") bytes) exports the plan, binds, reaps and reports errors under qemu"
