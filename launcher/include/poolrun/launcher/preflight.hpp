#pragma once

// The doctor before a launch: the checks that decide whether a planned job would hang (a port it
// needs is down, a RoCE GID that does not route) or run slow (GPUDirect RDMA off, ACS, a port
// trained slow), for the ports and GPU-NIC pairs the plan uses and nothing else.

#include <functional>
#include <ostream>

#include "poolrun/doctor/doctor.hpp"
#include "poolrun/launcher/plan.hpp"

namespace poolrun::launcher {

// What the plan uses on node `node_index`: its ranks' RDMA ports, the GID index NCCL will use on
// RoCE ports (NCCL_IB_GID_INDEX of the rank's environment, the user's value where set), and the
// GPU-NIC pairs with GPUDirect RDMA.
doctor::Scope doctorScope(const JobPlan& plan, size_t node_index);

// Checks every node of the plan: through `roots` where `live(node)` (this machine), else from the
// node's topology (a simulated node's fixture, a pool's inventory). Each check names its node.
doctor::Report preflight(const JobPlan& plan, const std::function<bool(const NodePlan&)>& live,
                         const doctor::Roots& roots = {});

// Prints the WARN and FAIL lines of a pre-launch report ("poolrun: doctor: ...").
void printPreflight(const doctor::Report& report, std::ostream& err);

}  // namespace poolrun::launcher
