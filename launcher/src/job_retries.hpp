#pragma once

// poolrun --retries (docs/running.md): how a run of the job failed, and whether it starts again on
// a lease without the nodes that failed.

#include <filesystem>
#include <map>
#include <ostream>
#include <string>

#include "poolrun/launcher/supervisor.hpp"
#include "poolrun/pool/client.hpp"
#include "run_options.hpp"

namespace poolrun::launcher {

// Whether a run failed of itself (a rank exited non-zero, a node's daemon could not start or was
// lost; not the user's signal, --timeout, the lease's loss, a preemption or a refusal before the
// start), and the nodes with the evidence against each.
struct RunFailure {
  bool failed = false;
  std::map<std::string, std::string> nodes;  // node -> what failed there
};

// The failure of the run `r` of `lease`, with the nodes to blame: the daemon mpirun lost or could not
// start (its remote shell's line names the node), and those of the lease whose agents poold says went
// quiet (asked once the job has ended; a pool that cannot be asked adds none).
RunFailure runFailure(pool::PoolClient& pool, const pool::Lease& lease, const SuperviseResult& r);

// After a run that failed of itself with exit status `status`: true where the job is to start again
// (one more of `retries`; its nodes to blame added to `options`' excluded nodes; a line said), false
// once options.retries are spent (a NODE_FAIL line where a node is to blame).
bool retryAfterFailure(const RunFailure& failure, int status, int& retries, RunOptions& options,
                       const std::filesystem::path& dir, std::ostream& err);

}  // namespace poolrun::launcher
