#!/usr/bin/env bash
# Installs the dependencies, builds and runs the whole test suite: the format check, the main
# build (warnings as errors) with every test tier, the allreduce benchmark on the simulated cluster
# (correctness and the runtime's overhead against plain MPI), the unit tests again under AddressSanitizer and
# UndefinedBehaviorSanitizer, and each fuzz target for a bounded time. This is what CI runs.
#   POOLRUN_FUZZ_SECONDS  seconds per fuzz target (default 30)
#   POOLRUN_SKIP_SANITIZE=1, POOLRUN_SKIP_FUZZ=1  leave those stages out (local iterations)
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
fuzz_seconds=${POOLRUN_FUZZ_SECONDS:-30}

step() { printf '\n== [%dm%02ds] %s\n' $((SECONDS / 60)) $((SECONDS % 60)) "$*"; }

step "dependencies"
scripts/setup-deps.sh

# The PyTorch tests run here, not skip: setup-deps installed python3-torch.
export POOLRUN_REQUIRE_TORCH=1
# The dashboard's browser test runs here, not skips: setup-deps installed chromium and Selenium.
export POOLRUN_REQUIRE_BROWSER=1
# Likewise the etcd tests (the etcd store, poold replicas): setup-deps installed etcd-server.
export POOLRUN_REQUIRE_ETCD=1
# And the MUNGE tests (a private munged, users made with useradd), where this runs as root.
if [ "$(id -u)" -eq 0 ]; then export POOLRUN_REQUIRE_MUNGE=1; fi

step "format"
scripts/check-format.sh

step "build (warnings as errors)"
# Line tables only (-g1): enough for a backtrace, and about a quarter less compile time (measured on
# the planner tests: 20 s of CPU instead of 27).
# The unit and real-machine tiers are built and run once, under the sanitizers (below), which check
# more than a plain run; this build has the integration tier, the tools and the benchmarks. Without
# the sanitizer stage it builds and runs every tier.
unit_here=OFF
[ "${POOLRUN_SKIP_SANITIZE:-0}" = 1 ] && unit_here=ON
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" \
  -DPOOLRUN_WERROR=ON -DPOOLRUN_BUILD_UNIT_TESTS=$unit_here >/dev/null
cmake --build build -j "$jobs"

# One clang build serves both later stages: everything in it carries AddressSanitizer and
# UndefinedBehaviorSanitizer, so the unit and real-machine tiers run under the sanitizers from the
# same objects the fuzz targets link (one build instead of two: about 6 minutes less CI on 2 cores).
# It compiles at the lowest CPU priority while the integration tier runs: those tests mostly wait
# (their processes sleep, poll and time out: 27 s of CPU in 89 s on 2 cores, measured 2026-12-02),
# so the build takes the CPU they leave and they get it back the moment they need it.
sanitizer_build=0
{ [ "${POOLRUN_SKIP_SANITIZE:-0}" != 1 ] || [ "${POOLRUN_SKIP_FUZZ:-0}" != 1 ]; } && sanitizer_build=1
build_pid=
stop_build() { [ -n "$build_pid" ] && kill -- "-$build_pid" 2>/dev/null; true; }
trap stop_build EXIT
if [ $sanitizer_build = 1 ]; then
  step "sanitizer build started beside the integration tests (clang, ASan + UBSan, warnings as errors)"
  # -O0 (half the compile time of -O1), but -O1 for the libraries the fuzz targets link and the
  # targets themselves (tests/fuzz/CMakeLists.txt): at -O0 they fuzz 60 times slower.
  CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O0 -gline-tables-only -DNDEBUG" -DPOOLRUN_WERROR=ON \
    -DPOOLRUN_BUILD_FUZZERS=ON -DPOOLRUN_BUILD_TESTS=ON -DPOOLRUN_BUILD_BENCHMARKS=OFF -DPOOLRUN_TEST_OPTIMIZATION=-O0 >/dev/null
  # Only what the unit and real-machine tiers run (the integration tier runs from the main build).
  # In a session of its own, so that a failure here stops the whole build (stop_build).
  setsid nice -n 19 cmake --build build-fuzz -j "$jobs" --target unit_tests fuzz_targets >build-fuzz/build.log 2>&1 &
  build_pid=$!
fi

step "tests: integration$([ $unit_here = ON ] && echo ', unit, real-machines')"
# Twice as many at once as there are cores: most of them wait on processes and timeouts.
ctest --test-dir build --output-on-failure -j $((jobs * 2)) -LE 'gpu|bench'

if [ $sanitizer_build = 1 ]; then
  step "sanitizer build: waiting for it to finish"
  build_status=0
  wait "$build_pid" || build_status=$?
  build_pid=
  # Its output, as a build in the foreground would have shown it (the whole of it where it failed).
  if [ $build_status = 0 ]; then tail -n 3 build-fuzz/build.log; else cat build-fuzz/build.log; fi
  [ $build_status = 0 ] || { echo "sanitizer build failed (status $build_status)"; exit "$build_status"; }
fi

# After the sanitizer build, so that the benchmark's timings share the machine with nothing.
step "allreduce benchmark on the simulated cluster (results in build/bench/)"
scripts/bench-allreduce.sh build

if [ "${POOLRUN_SKIP_SANITIZE:-0}" != 1 ]; then
  step "unit and real-machine tests under AddressSanitizer + UndefinedBehaviorSanitizer"
  # Open MPI's plugins leak at exit; tests that call MPI_Init need detect_leaks=0 (set per test).
  ASAN_OPTIONS=abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir build-fuzz --output-on-failure -j "$jobs" -L 'unit|real-machines'
fi

# One fuzz target from a copy of its seed corpus for SECONDS; prints its last lines (more when it
# fails) and returns its status. Two run at once: each is one process on one core.
fuzz_one() {
  local fuzzer=$1 seconds=$2 name corpus log seeds status=0
  name=$(basename "$fuzzer")
  corpus=$(mktemp -d)
  log=$(mktemp)
  cp tests/fuzz/corpus/"${name#fuzz_}"/* "$corpus"/
  seeds=$(find "$corpus" -type f | wc -l)
  "$fuzzer" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=0 \
    "$corpus" >"$log" 2>&1 || status=$?
  printf '%s: %ss from %s seeds\n%s\n' "$name" "$seconds" "$seeds" \
    "$(tail -n "$([ "$status" = 0 ] && echo 3 || echo 80)" "$log")"
  rm -rf "$corpus" "$log"
  return "$status"
}

if [ "${POOLRUN_SKIP_FUZZ:-0}" != 1 ]; then
  step "fuzz targets (${fuzz_seconds}s each, $jobs at a time)"
  export -f fuzz_one
  find build-fuzz/tests/fuzz -maxdepth 1 -type f -executable -name 'fuzz_*' | sort |
    xargs -P "$jobs" -I{} bash -c 'fuzz_one "$1" "$2"' _ {} "$fuzz_seconds"
fi

step "all tests passed"
