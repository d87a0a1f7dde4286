// The versions are the headers' at build time: NCCL and CUDA only where the build found them
// (POOLRUN_HAVE_CUDA), MPI where its include folder was found, hwloc always.

#include "poolrun/topo/version.hpp"

#include <hwloc.h>

#include <string>

#if defined(POOLRUN_VERSION_HAVE_CUDA) && __has_include(<nccl.h>)
#include <cuda_runtime_api.h>
#include <nccl.h>
#endif
#if defined(POOLRUN_VERSION_HAVE_MPI) && __has_include(<mpi.h>)
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

namespace poolrun::topo {
namespace {

std::string dotted(int major, int minor, int patch) {
  return std::to_string(major) + "." + std::to_string(minor) +
         (patch >= 0 ? "." + std::to_string(patch) : "");
}

}  // namespace

std::string versionText(std::string_view program) {
#ifdef NCCL_MAJOR
  const std::string nccl = dotted(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH);
#else
  const std::string nccl = "none";
#endif
#ifdef CUDART_VERSION
  const std::string cuda = dotted(CUDART_VERSION / 1000, CUDART_VERSION % 1000 / 10, -1);
#else
  const std::string cuda = "none";
#endif
#if defined(OMPI_MAJOR_VERSION)
  const std::string mpi = "Open MPI " + dotted(OMPI_MAJOR_VERSION, OMPI_MINOR_VERSION, OMPI_RELEASE_VERSION);
#elif defined(MPICH_VERSION)
  const std::string mpi = std::string("MPICH ") + MPICH_VERSION;
#else
  const std::string mpi = "Open MPI none";
#endif
#ifdef HWLOC_VERSION
  const std::string hwloc = HWLOC_VERSION;
#else
  const std::string hwloc = dotted(HWLOC_API_VERSION >> 16, (HWLOC_API_VERSION >> 8) & 0xff, -1);
#endif
  return std::string(program) + " " + POOLRUN_VERSION + "\nbuilt with: NCCL " + nccl + ", CUDA " + cuda +
         ", " + mpi + ", hwloc " + hwloc + "\n";
}

}  // namespace poolrun::topo
