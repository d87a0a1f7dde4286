#pragma once

// The job's daemons started by the nodes' agents (docs/launch.md): the launch file poolrun-rsh reads.

#include <filesystem>

#include "poolrun/launcher/job_directory.hpp"
#include "poolrun/launcher/plan.hpp"
#include "poolrun/pool/client.hpp"
#include "run_options.hpp"

namespace poolrun::launcher {

// Where the nodes' agents start the job's daemons (docs/launch.md): the launch file, with each node's
// agent and the credential poold signed for it, written to the job directory (mode 0600); empty
// where mpirun starts them over ssh (--launch ssh; auto where a node's agent starts none). Throws
// poolrun::Error where --launch agents cannot be had.
std::filesystem::path agentLaunchFile(pool::PoolClient& pool, const pool::Lease& lease, const JobPlan& plan,
                                      pool::RankSite site, const RunOptions& o, const JobDirectory& dir);

}  // namespace poolrun::launcher
