#pragma once

// The node's health checks (docs/agent.md, "Health checks"): the doctor's checks of the node's GPUs
// and NIC ports, run by the agent while the node is idle. What fails is told poold in each
// heartbeat (Heartbeat::health_failure), which drains the node with it, and resumes a node its
// agent drained once they pass again.

#include <filesystem>
#include <functional>
#include <string>

#include "poolrun/doctor/report.hpp"

namespace poolrun::agent {

// What the FAILs of `report` say, for a heartbeat: "CHECK SUBJECT: EVIDENCE" each, "; " between,
// cut to pool::kMaxHealthBytes at a character's boundary, bytes that are not UTF-8 shown as \xNN;
// "" where none failed. WARN and SKIP do not drain a node, nor rdma.memlock (the limit the doctor
// reads is the agent's own process's, not its jobs').
std::string healthFailure(const doctor::Report& report);

// The doctor's node checks (doctor::checkNode) of RDMA ports under `sysfs_root` ("/sys" on a real
// node) and of the GPUs through NVML (`cuda_probe`: poolrun-cuda-probe, for MIG devices), without the
// host's settings and tools (those are the site's choices, not faults). Never throws: a check that
// cannot read what it needs SKIPs.
std::function<std::string()> doctorHealthCheck(std::filesystem::path sysfs_root, std::string cuda_probe);

}  // namespace poolrun::agent
