find_package(PkgConfig REQUIRED)
pkg_check_modules(HWLOC REQUIRED IMPORTED_TARGET hwloc>=2.0)
add_library(poolrun_hwloc INTERFACE)
target_link_libraries(poolrun_hwloc INTERFACE PkgConfig::HWLOC)

find_package(nlohmann_json 3.10 REQUIRED)
# The C++ libraries go into the binaries (static archives, or header-only where Debian ships no
# archive), so that a poolrun process loads only C libraries: each shared C++ library costs every
# launch its loading and relocation (together about 10 ms of CPU on a CI-class machine).
find_package(pugixml REQUIRED)  # pugixml::static
find_package(fmt REQUIRED)      # fmt::fmt-header-only
set(Boost_USE_STATIC_LIBS ON)
find_package(Boost 1.74 REQUIRED COMPONENTS program_options)
# TLS (Debian's libssl-dev): poold's server through Boost.Asio's ssl, the clients through the
# module common/ builds (libpoolrun-tls.so), so that only https:// loads it.
find_package(OpenSSL 3.0 REQUIRED)
# poold's heartbeat reader (pool/server/src/heartbeat_reader.cpp). Debian ships it shared only, so only
# poold links it: the launch path stays free of shared C++ libraries.
find_package(simdjson 3.0 REQUIRED)
find_path(POOLRUN_TOMLPP_INCLUDE toml++/toml.h REQUIRED)
add_library(poolrun_tomlpp INTERFACE)
target_include_directories(poolrun_tomlpp SYSTEM INTERFACE ${POOLRUN_TOMLPP_INCLUDE})
target_compile_definitions(poolrun_tomlpp INTERFACE TOML_HEADER_ONLY=1)

# CUDA and NCCL: optional. AUTO uses them when /usr/local/cuda (or CUDAToolkit_ROOT) has them.
set(POOLRUN_HAVE_CUDA OFF)
if(NOT POOLRUN_WITH_CUDA STREQUAL "OFF")
  if(NOT CUDAToolkit_ROOT AND EXISTS /usr/local/cuda)
    set(CUDAToolkit_ROOT /usr/local/cuda)
  endif()
  find_package(CUDAToolkit QUIET)
  find_library(POOLRUN_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_ROOT}/lib64)
  find_path(POOLRUN_NCCL_INCLUDE nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} ${CUDAToolkit_ROOT}/include)
  if(CUDAToolkit_FOUND AND POOLRUN_NCCL_LIBRARY AND POOLRUN_NCCL_INCLUDE)
    set(POOLRUN_HAVE_CUDA ON)
    add_library(poolrun_nccl INTERFACE)
    target_link_libraries(poolrun_nccl INTERFACE ${POOLRUN_NCCL_LIBRARY} CUDA::cudart)
    target_include_directories(poolrun_nccl INTERFACE ${POOLRUN_NCCL_INCLUDE})
  elseif(POOLRUN_WITH_CUDA STREQUAL "ON")
    message(FATAL_ERROR "POOLRUN_WITH_CUDA=ON but CUDA or NCCL was not found "
                        "(looked in ${CUDAToolkit_ROOT}); set CUDAToolkit_ROOT or use AUTO")
  endif()
endif()
message(STATUS "poolrun: GPU paths (CUDA/NCCL) ${POOLRUN_HAVE_CUDA}")

# The GPU pool: its state in SQLite, poold's HTTP server and client with cpp-httplib.
find_package(SQLite3 REQUIRED)
find_package(Threads REQUIRED)
# Linked in where the distribution ships the archive: loading and relocating libsqlite3.so cost
# every poolrun about 1 ms (measured with a spawn loop), a tenth of what it spends before mpirun.
find_library(POOLRUN_SQLITE_ARCHIVE libsqlite3.a)
add_library(poolrun_sqlite INTERFACE)
if(POOLRUN_SQLITE_ARCHIVE)
  target_include_directories(poolrun_sqlite SYSTEM INTERFACE ${SQLite3_INCLUDE_DIRS})
  target_link_libraries(poolrun_sqlite INTERFACE ${POOLRUN_SQLITE_ARCHIVE} m ${CMAKE_DL_LIBS} Threads::Threads)
else()
  target_link_libraries(poolrun_sqlite INTERFACE SQLite::SQLite3)
endif()
pkg_check_modules(CPPHTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib>=0.11)
