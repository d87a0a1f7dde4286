// What starting a job's daemons through the agents costs (label bench, never a pass/fail on time;
// docs/measurements.md): `poolrun --simulate -n 8 --gpus-per-node 4 true` on two agent nodes,
// whole (acquire, plan, launch, release), with --launch agents (poolrun-rsh, a credential per node,
// the agent's fork into the lease's cgroup and the relay) against --launch ssh, which on a
// simulated cluster is poolrun-sim-agent (a fork and exec here: the floor), alternating.
// Run: ctest --test-dir build -L bench -R LaunchBench --output-on-failure (as root, ~1 minute).

#include <algorithm>
#include <optional>

#include "launch_pool.hpp"

namespace poolrun::test {
namespace {

using Clock = std::chrono::steady_clock;

class LaunchBench : public LaunchPoolTest {
 protected:
  // Seconds for one run of `args`; nullopt where it failed (said, with its first lines).
  std::optional<double> once(const std::string& args) {
    const auto start = Clock::now();
    const ProcessResult r = asUser("--simulate -n 8 --gpus-per-node 4 " + args + " true");
    if (r.status == 0) return std::chrono::duration<double>(Clock::now() - start).count();
    std::printf("  a run with %s failed (exit %d): %s\n", args.c_str(), r.status,
                r.err.substr(0, 1500).c_str());
    return std::nullopt;
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

TEST_F(LaunchBench, AJobsStartThroughTheAgentsAgainstALocalFork) {
  std::vector<double> agents, local;
  once("--launch agents");  // warm: the page cache, the agents' key
  int failedAgents = 0, failedLocal = 0;
  for (int i = 0; i < 15; ++i) {
    if (auto t = once("--launch agents"))
      agents.push_back(*t);
    else
      ++failedAgents;
    if (auto t = once("--launch ssh"))
      local.push_back(*t);
    else
      ++failedLocal;
  }
  ASSERT_FALSE(agents.empty() || local.empty());
  const double a = median(agents), l = median(local);
  std::printf(
      "a job of 8 ranks on 2 nodes, whole (acquire, plan, launch, release), median of 15:\n"
      "  through the agents (poolrun-rsh, credentials, the lease's cgroups): %.3f s (%d failed)\n"
      "  poolrun-sim-agent (a fork and exec here):                           %.3f s (%d failed)\n"
      "  ratio %.2f\n",
      a, failedAgents, l, failedLocal, a / l);
  EXPECT_EQ(failedAgents, 0) << "every start through the agents went through";
}

}  // namespace
}  // namespace poolrun::test
