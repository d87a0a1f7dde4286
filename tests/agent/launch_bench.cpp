// What starting a job's daemons through the agents costs (label bench, never a pass/fail on time;
// docs/measurements.md): `poolrun --simulate -n 8 --gpus-per-node 4 true` on two agent nodes,
// whole (acquire, plan, launch, release), with --launch agents (poolrun-rsh, a credential per node,
// the agent's fork into the lease's cgroup and the relay) against --launch ssh, which on a
// simulated cluster is poolrun-sim-agent (a fork and exec here: the floor), alternating.
// Run: ctest --test-dir build -L bench -R LaunchBench --output-on-failure (as root, ~1 minute).

#include <algorithm>

#include "launch_pool.hpp"

namespace poolrun::test {
namespace {

using Clock = std::chrono::steady_clock;

class LaunchBench : public LaunchPoolTest {
 protected:
  // Seconds per run of `args`, `runs` times (each must exit 0).
  double once(const std::string& args) {
    const auto start = Clock::now();
    const ProcessResult r = asUser("--simulate -n 8 --gpus-per-node 4 " + args + " true");
    EXPECT_EQ(r.status, 0) << args << ": " << r.err;
    return std::chrono::duration<double>(Clock::now() - start).count();
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

TEST_F(LaunchBench, AJobsStartThroughTheAgentsAgainstALocalFork) {
  std::vector<double> agents, local;
  once("--launch agents");  // warm: the page cache, the agents' key
  for (int i = 0; i < 7; ++i) {
    agents.push_back(once("--launch agents"));
    local.push_back(once("--launch ssh"));
  }
  const double a = median(agents), l = median(local);
  std::printf(
      "a job of 8 ranks on 2 nodes, whole (acquire, plan, launch, release), median of 7:\n"
      "  through the agents (poolrun-rsh, credentials, the lease's cgroups): %.3f s\n"
      "  poolrun-sim-agent (a fork and exec here):                           %.3f s\n"
      "  ratio %.2f\n",
      a, l, a / l);
}

}  // namespace
}  // namespace poolrun::test
