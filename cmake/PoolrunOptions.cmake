# Warning and sanitizer flags, applied per target through poolrun_target_defaults() rather than
# globally, so that third-party code built in the tree is not affected.

# Unity builds: each target's sources are compiled a few at a time as one translation unit, so
# that the headers they share (JSON, Boost, the project's own) are parsed and their templates
# instantiated once per batch instead of once per file (docs/measurements.md has the saving). A
# source whose file-local types would clash with another's, or that is heavy enough to compile
# alone on its own core, is marked SKIP_UNITY_BUILD_INCLUSION where its target is defined.
option(POOLRUN_UNITY_BUILD "Compile each target's sources in batches (unity build)" ON)
set(POOLRUN_UNITY_BATCH_SIZE 8 CACHE STRING "Sources per unity batch")

function(poolrun_target_defaults target)
  target_compile_features(${target} PUBLIC cxx_std_20)
  set_target_properties(${target} PROPERTIES UNITY_BUILD ${POOLRUN_UNITY_BUILD}
                                             UNITY_BUILD_BATCH_SIZE ${POOLRUN_UNITY_BATCH_SIZE})
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor
                                           -Wconversion -Wno-sign-conversion)
  if(POOLRUN_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()

if(POOLRUN_SANITIZE)
  # Sanitizers must cover every object of the process (libraries, tests, tools), so this one is
  # set for the whole tree; it is only on in the sanitizer build tree.
  add_compile_options(-fsanitize=${POOLRUN_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  add_link_options(-fsanitize=${POOLRUN_SANITIZE})
endif()

if(POOLRUN_BUILD_FUZZERS)
  # The fuzz targets' tree carries the sanitizers everywhere; coverage instrumentation
  # (-fsanitize=fuzzer-no-link) only on what the targets link (tests/fuzz/CMakeLists.txt): it
  # costs about 40% more compile time on top of ASan at -O0 (measured on the launcher).
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer)
  add_link_options(-fsanitize=address,undefined)
endif()

# The binaries every launch starts (poolrun, and poolrun-rank once per rank) carry their own C++
# runtime: loading and relocating libstdc++ costs each process about 4 ms of CPU, which adds up
# across the ranks of a node. Only for binaries that load no shared C++ library (which would bring
# libstdc++ back); not in sanitizer builds, which need it shared.
function(poolrun_fast_start target)
  if(NOT POOLRUN_SANITIZE AND NOT POOLRUN_BUILD_FUZZERS AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    target_link_options(${target} PRIVATE -static-libstdc++ -static-libgcc)
  endif()
endfunction()

# Test sources compile against one precompiled GoogleTest and JSON header (tests/CMakeLists.txt).
# Libraries do not: tried, it saved about 10 s of a 8-minute build and hid missing includes.
# scripts/test.sh runs the unit and real-machine tiers only under the sanitizers: its main build
# turns this off and builds the integration tier, the tools and the benchmarks.
option(POOLRUN_BUILD_UNIT_TESTS "Build the unit and real-machine test tiers in the default target" ON)
option(POOLRUN_PRECOMPILED_HEADERS "Compile test sources against one precompiled GoogleTest and JSON header" ON)
