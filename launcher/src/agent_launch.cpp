// The job's daemons started by the nodes' agents (agent_launch.hpp).

#include "agent_launch.hpp"

#include <nlohmann/json.hpp>

#include "poolrun/common/error.hpp"

namespace poolrun::launcher {

std::filesystem::path agentLaunchFile(pool::PoolClient& pool, const pool::Lease& lease, const JobPlan& plan,
                                      pool::RankSite site, const RunOptions& o, const JobDirectory& dir) {
  if (o.launch == "ssh" || o.srun) return {};
  if (site != pool::RankSite::kRemoteNodes) return {};  // --launch agents is refused before (jobSite)
  pool::LaunchCredentials credentials;
  try {
    credentials = pool.launchCredentials(lease.id);
  } catch (const Error&) {
    if (o.launch == "agents") throw;
    return {};  // auto: a poold without launch credentials (an older one) has its nodes take ssh
  }
  nlohmann::json nodes = nlohmann::json::object();
  for (const pool::LaunchNode& n : credentials.nodes)
    nodes[n.node] = {{"agent", n.agent}, {"credential", n.credential}};
  for (const NodePlan& n : plan.nodes) {
    if (nodes.contains(n.name) && !nodes[n.name]["agent"].get<std::string>().empty()) continue;
    if (o.launch == "auto") return {};
    throw Error(
        ErrorCode::kUnsupported,
        "--launch agents: the agent of node " + n.name +
            " starts no daemons (start it with poold-agent --launch-listen HOST:PORT), or use --launch ssh");
  }
  const nlohmann::json file = {{"lease", lease.id}, {"expires", credentials.expires}, {"nodes", nodes}};
  using std::filesystem::perms;
  return dir.write("launch.json", file.dump() + "\n", perms::owner_read | perms::owner_write);
}

}  // namespace poolrun::launcher
