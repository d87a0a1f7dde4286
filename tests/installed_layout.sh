#!/bin/sh
# `cmake --install` puts every program in PREFIX/bin and the TLS module in PREFIX/lib/poolrun, where
# the installed programs find it: poolctl from PREFIX/bin opens PREFIX/lib/poolrun/libpoolrun-tls.so
# (not the build tree's) for an https:// pool. About 5 s (the copy).
# Usage: installed_layout.sh BUILD_DIR CMAKE
set -u
build=${1:?usage: installed_layout.sh BUILD_DIR CMAKE}
cmake=${2:?usage: installed_layout.sh BUILD_DIR CMAKE}
prefix=$(mktemp -d) || exit 1
trap 'rm -rf "$prefix"' EXIT
if ! "$cmake" --install "$build" --prefix "$prefix" >"$prefix.log" 2>&1; then
  echo "cmake --install $build failed:"; cat "$prefix.log"; rm -f "$prefix.log"; exit 1
fi
rm -f "$prefix.log"
for program in poolrun poolctl poold poold-agent poolrun-rank; do
  [ -x "$prefix/bin/$program" ] || { echo "$program is not installed in $prefix/bin"; exit 1; }
done
# The NCCL tuner plugin where NCCL looks for it (NCCL_TUNER_PLUGIN=poolrun: libnccl-tuner-poolrun.so
# on the library path), the documentation, and the systemd units naming this install's programs.
for file in lib/libnccl-tuner-poolrun.so share/doc/poolrun/README.md share/doc/poolrun/accounting.md \
    share/doc/poolrun/index.md lib/systemd/system/poold.service lib/systemd/system/poold-agent.service; do
  [ -f "$prefix/$file" ] || { echo "$file is not installed in $prefix"; ls -R "$prefix" | head -40; exit 1; }
done
for unit in poold poold-agent; do
  grep -q "^ExecStart=$prefix/bin/$unit " "$prefix/lib/systemd/system/$unit.service" ||
    { echo "$unit.service does not start $prefix/bin/$unit:"; grep ExecStart "$prefix/lib/systemd/system/$unit.service"; exit 1; }
done
module="$prefix/lib/poolrun/libpoolrun-tls.so"
[ -f "$module" ] || { echo "the TLS module is not installed at $module"; exit 1; }
# Port 1 of loopback takes no connection: the module is opened, then the connection is refused.
out=$(LD_DEBUG=files "$prefix/bin/poolctl" --pool https://127.0.0.1:1 status 2>&1)
if ! printf '%s\n' "$out" | grep -q "file=$module"; then
  echo "the installed poolctl did not open $module:"; printf '%s\n' "$out" | grep -E "tls|error" | head -5; exit 1
fi
if ! printf '%s\n' "$out" | grep -q "cannot reach poold at https://127.0.0.1:1"; then
  echo "the installed poolctl did not try https://127.0.0.1:1:"; printf '%s\n' "$out" | grep error | head -5; exit 1
fi
echo "installed in $prefix: the programs, the tuner plugin, the documentation, the units, and the TLS module the installed poolctl opens"
