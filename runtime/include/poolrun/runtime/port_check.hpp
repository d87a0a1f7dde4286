#pragma once

// On a real node, before the program starts: the RDMA ports the rank's plan gives NCCL
// (NCCL_IB_HCA) are up. A port that is down or waiting for a subnet manager makes NCCL hang in its
// connection setup on every rank of the job; stopping this rank with the port named ends the job
// at once instead. The launcher asks for it (POOLRUN_CHECK_PORTS=1) where it cannot read the nodes
// itself; `poolrun doctor` on the node says more.

#include <filesystem>
#include <string>
#include <vector>

namespace poolrun::runtime {

// One line per port of `nccl_ib_hca` (NCCL's syntax: "=mlx5_0:1,mlx5_1", a leading "=" for exact
// names, port 1 where none is given) that is not ACTIVE under SYSFS_ROOT/class/infiniband, saying
// its state and where it was read. An exclusion list ("^...") names no port to check: empty.
std::vector<std::string> downPorts(const std::string& nccl_ib_hca,
                                   const std::filesystem::path& sysfs_root = "/sys");

}  // namespace poolrun::runtime
