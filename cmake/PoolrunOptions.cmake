# Warning and sanitizer flags, applied per target through poolrun_target_defaults() rather than
# globally, so that third-party code built in the tree is not affected.

function(poolrun_target_defaults target)
  target_compile_features(${target} PUBLIC cxx_std_20)
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
  # Coverage instrumentation for everything the fuzz targets link.
  add_compile_options(-fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer)
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
