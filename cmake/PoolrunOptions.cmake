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
