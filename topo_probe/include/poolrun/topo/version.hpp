#pragma once

// What `--version` prints in every poolrun binary (poolrun, poolctl, poold, poolrun-sim-agent): the
// project's version and the versions of NCCL, CUDA, Open MPI and hwloc whose headers the build
// compiled against ("none" for what the build lacks). No library is loaded to learn them.

#include <string>
#include <string_view>

namespace poolrun::topo {

// "poolrun 0.1.0\nbuilt with: NCCL 2.28.9, CUDA 13.0, Open MPI 4.1.4, hwloc 2.9.0\n".
std::string versionText(std::string_view program);

}  // namespace poolrun::topo
