#!/bin/sh
# The Debian packages (cmake/PoolrunPackaging.cmake), made by CPack from the build folder and
# installed with dpkg into a fresh root (dpkg --root, the maintainer scripts run for that root),
# then run from there: the programs, the TLS module the installed poolctl opens, poold started by
# its unit's own command line as an unprivileged user, a node that joins it with poold-agent started
# by its unit's command line, and the packages removed again leaving no file. About 40 s (CPack's
# strip and compression of the three packages take most of it).
# Usage: packages.sh BUILD_DIR SOURCE_DIR
set -u
build=${1:?usage: packages.sh BUILD_DIR SOURCE_DIR}
source=${2:?usage: packages.sh BUILD_DIR SOURCE_DIR}
work=$(mktemp -d) || exit 1
pids=""
cleanup() {
  for p in $pids; do kill "$p" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "packages: $*"; exit 1; }

# --- made
( cd "$build" && cpack -G DEB -B "$work/out" ) >"$work/cpack.log" 2>&1 || { cat "$work/cpack.log"; fail "cpack failed"; }
version=$(sed -n 's/^set(CPACK_PACKAGE_VERSION "\(.*\)")$/\1/p' "$build/CPackConfig.cmake")
for p in poolrun poold poold-agent; do
  deb=$(ls "$work/out/${p}_${version}_"*.deb 2>/dev/null) || fail "no package $p in $work/out: $(ls "$work/out")"
  [ "$(dpkg-deb -f "$deb" Package)" = "$p" ] || fail "$deb is not package $p"
  # Every dependency is a package Debian has (installed here, where the programs were built), or ours.
  for dep in $(dpkg-deb -f "$deb" Depends | tr ',' '\n' | sed 's/(.*)//; s/|.*//; s/ //g'); do
    case $dep in poolrun) continue ;; esac
    dpkg-query -W -f='${Status}' "$dep" 2>/dev/null | grep -q "install ok installed" ||
      fail "package $p depends on '$dep', which is not a package installed here"
  done
done
dpkg-deb -f "$work/out/poold_"*.deb Depends | grep -q libssl3 || fail "poold does not depend on libssl3"

# --- installed into a fresh root
root="$work/root"
mkdir -p "$root/var/lib/dpkg/info" "$root/var/lib/dpkg/updates" "$root/etc"
: >"$root/var/lib/dpkg/status"
printf 'root:x:0:0:root:/root:/bin/sh\n' >"$root/etc/passwd"
printf 'root:x:0:\n' >"$root/etc/group"
printf 'root:*:19000:0:99999:7:::\n' >"$root/etc/shadow"
printf 'root:*::\n' >"$root/etc/gshadow"
# Its dependencies are not in the empty root: --force-depends. The scripts run for the root.
dpkg --root="$root" --force-depends --force-script-chrootless --log=/dev/null -i "$work/out/"*.deb \
  >"$work/dpkg.log" 2>&1 || { cat "$work/dpkg.log"; fail "dpkg -i into $root failed"; }
for p in poolrun poold poold-agent; do
  dpkg --root="$root" -s "$p" 2>/dev/null | grep -q "Status: install ok installed" || fail "$p is not installed in $root"
done
for f in usr/bin/poolrun usr/bin/poolctl usr/bin/poold usr/bin/poold-agent usr/bin/poolrun-rank \
    usr/bin/poolrun-sim-agent usr/lib/libnccl-tuner-poolrun.so usr/lib/poolrun/libpoolrun-tls.so \
    usr/share/doc/poolrun/pool.md usr/lib/systemd/system/poold.service usr/lib/systemd/system/poold-agent.service; do
  [ -e "$root/$f" ] || fail "$f is not installed in $root"
done
grep -q '^poold:' "$root/etc/passwd" || fail "the poold package made no user poold in $root/etc/passwd"
[ -d "$root/etc/poold" ] || fail "the poold package made no /etc/poold in $root"
grep -q '^ExecStart=/usr/bin/poold ' "$root/usr/lib/systemd/system/poold.service" || fail "poold.service does not start /usr/bin/poold"
grep -q '^User=poold$' "$root/usr/lib/systemd/system/poold.service" || fail "poold.service does not run as poold"
# The agent's children (jobs' launchers, ranks' daemons) inherit its unit's sandbox: none that
# would keep a job from /home, /tmp or setuid programs.
if grep -E '^(ProtectSystem|ProtectHome|NoNewPrivileges|PrivateTmp|ReadOnlyPaths)=' \
    "$root/usr/lib/systemd/system/poold-agent.service"; then
  fail "poold-agent.service sandboxes the agent, and with it every job it starts"
fi
# The units as systemd reads them: every key known, every program there (a copy under another
# name, naming the root's programs). Any word from systemd-analyze is a failure.
if command -v systemd-analyze >/dev/null; then
  mkdir "$work/units"
  for unit in poold poold-agent; do
    sed "s#/usr/bin/#$root/usr/bin/#" "$root/usr/lib/systemd/system/$unit.service" >"$work/units/pkg-$unit.service"
    systemd-analyze verify "$work/units/pkg-$unit.service" >"$work/verify.log" 2>&1
    [ $? -eq 0 ] && [ ! -s "$work/verify.log" ] || { head -5 "$work/verify.log"; fail "systemd-analyze verify $unit.service"; }
  done
fi

# --- run from there
"$root/usr/bin/poolctl" --version | grep -q "^poolctl $version" || fail "the installed poolctl does not run"
"$root/usr/bin/poolrun" --version | grep -q "^poolrun $version" || fail "the installed poolrun does not run"
out=$(LD_DEBUG=files "$root/usr/bin/poolctl" --pool https://127.0.0.1:1 status 2>&1)
printf '%s\n' "$out" | grep -q "file=$root/usr/lib/poolrun/libpoolrun-tls.so" ||
  fail "the installed poolctl did not open the installed TLS module"

# A unit's ExecStart as systemd would run it: the installed paths under the root, `$VAR` and
# `${VAR}` from the environment.
execStart() {
  sed -n 's/^ExecStart=//p' "$root/usr/lib/systemd/system/$1.service" |
    sed "s#/usr/bin/#$root/usr/bin/#; s#/var/lib/poold #$work/state #; s#/etc/poold/tokens#$work/tokens#" |
    sed 's/\${\([A-Z_]*\)}/$\1/g'
}
# poold as an unprivileged user (the unit's User=poold), its token file and state that user's.
mkdir "$work/state"
printf 'tok-admin-0123456789 root admin\n' >"$work/tokens"
chmod 600 "$work/tokens"
chown nobody "$work/state" "$work/tokens"
chmod 755 "$work"
POOLD_OPTIONS="--listen 127.0.0.1:0" setpriv --reuid=nobody --regid=nogroup --clear-groups \
  sh -c "exec $(execStart poold)" >"$work/poold.out" 2>"$work/poold.err" &
pids="$!"
i=0
# (The files appear once the background shells have opened them.)
until uri=$(sed -n 's/^poold: listening on \(http:[^ ]*\).*/\1/p' "$work/poold.out" 2>/dev/null) && [ -n "$uri" ]; do
  i=$((i + 1)); [ $i -lt 100 ] || { cat "$work/poold.err"; fail "the installed poold did not start"; }
  sleep 0.1
done
token=$(POOLRUN_TOKEN=tok-admin-0123456789 "$root/usr/bin/poolctl" --pool "$uri" node-token create 2>/dev/null) ||
  fail "the installed poolctl could not make a join token"
mkdir -m 0700 "$work/agent"
POOLD="$uri" POOLD_AGENT_TOKEN_FILE="$work/agent/node.token" \
  POOLD_AGENT_OPTIONS="--join $token --node pk01 --interval 1 --from $source/topologies/hgx-h100-8gpu-8nic.xml" \
  sh -c "exec $(execStart poold-agent)" 2>"$work/agent.err" &
pids="$pids $!"
i=0
until grep -q "registered node pk01" "$work/agent.err" 2>/dev/null; do
  i=$((i + 1)); [ $i -lt 200 ] || { cat "$work/agent.err"; fail "the installed poold-agent did not join and register"; }
  sleep 0.1
done
POOLRUN_TOKEN=tok-admin-0123456789 "$root/usr/bin/poolctl" --pool "$uri" nodes | grep -q "^pk01 " ||
  fail "poolctl nodes does not show pk01"
for p in $pids; do kill "$p"; wait "$p" 2>/dev/null; done
pids=""

# --- removed
dpkg --root="$root" --force-depends --force-script-chrootless --log=/dev/null -P poold-agent poold poolrun \
  >"$work/dpkg.log" 2>&1 || { cat "$work/dpkg.log"; fail "dpkg -P failed"; }
left=$(find "$root" -path "$root/var/lib/dpkg" -prune -o -path "$root/etc" -prune -o -type f -print | head -3)
[ -z "$left" ] || fail "files left after dpkg -P: $left"
echo "packages: poolrun, poold and poold-agent $version made, installed in a fresh root, run from there (poold as nobody, a node joined), and removed"
