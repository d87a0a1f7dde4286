// poolrun --retries (job_retries.hpp).

#include "job_retries.hpp"

namespace poolrun::launcher {

RunFailure runFailure(pool::PoolClient& pool, const pool::Lease& lease, const SuperviseResult& r) {
  RunFailure f;
  const bool stopped = r.forwarded_signal != 0 || r.timed_out || r.lease_lost || r.preempted || r.resized;
  if (stopped || r.exit_status == 0) return f;
  f.failed = true;
  if (r.lost && !r.lost->node.empty()) f.nodes[r.lost->node] = r.lost->reason;
  try {
    for (const std::string& node : pool.renew(lease.id).at_risk_nodes)
      f.nodes.emplace(node, "its agent has gone quiet (poold marks the node unreachable)");
  } catch (const std::exception&) {
  }
  return f;
}

bool retryAfterFailure(const RunFailure& failure, int status, int& retries, RunOptions& options,
                       const std::filesystem::path& dir, std::ostream& err) {
  std::string evidence, without;
  for (const auto& [node, why] : failure.nodes) {
    evidence += "; node " + node + ": " + why;
    without += (without.empty() ? "" : ",") + node;
  }
  if (retries == options.retries) {
    if (!failure.nodes.empty())
      err << "poolrun: the job ended NODE_FAIL (exit status " << status << evidence << ")"
          << (options.retries > 0 ? ", after " + std::to_string(retries) + " restarts (--retries)" : "")
          << "\n";
    return false;
  }
  ++retries;
  for (const auto& [node, why] : failure.nodes) options.placement.exclude_nodes.insert(node);
  err << "poolrun: the job failed (exit status " << status << evidence << "); restarting it"
      << (without.empty() ? "" : " on a lease without " + without) << " (retry " << retries << " of "
      << options.retries << "), in the same job directory " << dir.string() << "\n";
  return true;
}

}  // namespace poolrun::launcher
