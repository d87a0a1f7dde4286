// MIG instances in the live pool, on one machine: a real poold and a real agent whose fake NVML
// has GPU 0 of an HGX H100 split into seven 1g.10gb instances. The agent reports the layout, poold
// leases the instances as units, and a `poolrun --mig 1g.10gb -n 7` job on the simulated node runs
// seven ranks, each given its own instance by its UUID (CUDA_VISIBLE_DEVICES). When the agent reports
// another layout, the free instances go and come with it, and the lease of an instance that is gone
// ends.

#include <gtest/gtest.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "agent_run.hpp"
#include "fake_nvml/fake_nvml_file.hpp"
#include "live_pool_support.hpp"
#include "poold_process.hpp"
#include "poolrun/topo/sources.hpp"
#include "support/fixtures.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"

namespace poolrun::test {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::seconds;

std::string migUuid(int k) {
  return "MIG-7f3c2a10-0000-4000-8000-00000000000" + std::to_string(k);
}

// GPU instances of profile 1g.10gb (id 19), ids 7 to 7+n-1, a compute instance each, MIG devices
// 0 to n-1, UUIDs migUuid(1..n) (from `first`).
json sevenSlices(int n, int first = 1) {
  json instances = json::array();
  for (int k = 0; k < n; ++k)
    instances.push_back({{"id", 7 + k},
                         {"profile_id", 19},
                         {"placement", k},
                         {"compute_instances", {{{"id", 0}, {"index", k}, {"uuid", migUuid(first + k)}}}}});
  return instances;
}

class MigPoolTest : public ::testing::Test {
 protected:
  TempDir dir;
  std::unique_ptr<PooldProcess> poold;
  std::unique_ptr<AgentRun> agent;
  json nvml;
  std::string admin;

  void SetUp() override {
    dir.writeSecret("token-n01", "tok-node-n01-0123456789\n");
    std::filesystem::path tokens =
        dir.writeSecret("tokens", std::string(kTokens) + "tok-node-n01-0123456789 n01 node\n");
    admin = dir.writeSecret("admin", "tok-root-0123456789\n").string();
    std::filesystem::create_directories(dir.path() / "proc");
    nvml = fakeNvmlFor(topo::readTopologyFile(hgxNodeTopology()));
    setLayout(sevenSlices(7));
    poold = std::make_unique<PooldProcess>(dir.path() / "state", tokens,
                                           std::vector<std::string>{"--heartbeat-interval", "1"});
    agent = std::make_unique<AgentRun>("--pool " + poold->uri() + " --token-file " +
                                           (dir.path() / "token-n01").string() +
                                           " --node n01 --interval 1 --from " + hgxNodeTopology() +
                                           " --proc-root " + (dir.path() / "proc").string(),
                                       dir.path() / "agent-err", fakeNvmlEnv(dir.path() / "nvml.json"));
    ASSERT_TRUE(waitForInstances(7)) << poolctl({"nodes"}).dump() << slurp(dir.path() / "agent-err");
  }

  void setLayout(const json& gpuInstances, bool privileged = true) {
    nvml["gpus"][0]["mig"] = {{"current", true},
                              {"privileged", privileged},
                              {"profiles", migProfiles("H100 80GB")},
                              {"gpu_instances", gpuInstances}};
    writeFakeNvml(dir.path() / "nvml.json", nvml);
  }

  json poolctl(const std::vector<std::string>& args) {
    std::vector<std::string> argv{POOLCTL_BINARY, "--pool", poold->uri(), "--token-file", admin, "--json"};
    argv.insert(argv.end(), args.begin(), args.end());
    std::string out;
    if (runProgram(argv, &out) != 0) return nullptr;
    return json::parse(out, nullptr, false);
  }

  // GPU 0's instances as `poolctl nodes` shows them.
  json instances() {
    json nodes = poolctl({"nodes"});
    if (!nodes.is_array() || nodes.empty()) return json::array();
    return nodes[0]["gpus"][0].value("mig_instances", json::array());
  }

  bool waitForInstances(size_t n) {
    return within20s([&] { return instances().size() == n; });
  }
};

TEST_F(MigPoolTest, SevenRanksRunOnSevenInstancesEachByItsUuid) {
  json shown = instances();
  ASSERT_EQ(shown.size(), 7u) << shown.dump();
  EXPECT_EQ(shown[0]["profile"], "1g.10gb");
  EXPECT_EQ(shown[0]["state"], "free");
  json status = poolctl({"status"});
  EXPECT_EQ(status["gpus"]["mig"], 1) << status.dump();
  EXPECT_EQ(status["gpus"]["free"], 7) << status.dump();
  EXPECT_EQ(status["mig_instances"]["free"], 7) << status.dump();

  std::filesystem::path ranks = dir.path() / "ranks";
  std::filesystem::create_directories(ranks);
  ProcessResult job = runShell(
      "env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 POOLRUN_TOKEN=tok-alice-0123456789 "
      "POOLRUN_STATE_DIR=" +
      (dir.path() / "client").string() + " timeout 120 " + POOLRUN_BINARY + " --pool " + poold->uri() +
      " --simulate --mig 1g.10gb -n 7 --no-doctor sh -c 'echo \"$CUDA_VISIBLE_DEVICES $LOCAL_RANK\" > " +
      ranks.string() + "/$RANK'");
  ASSERT_EQ(job.status, 0) << job.out << job.err;
  std::set<std::string> uuids;
  for (int r = 0; r < 7; ++r) {
    std::string line = slurp(ranks / std::to_string(r));
    ASSERT_FALSE(line.empty()) << "rank " << r << " wrote nothing: " << job.err;
    uuids.insert(line.substr(0, line.find(' ')));
  }
  std::set<std::string> expected;
  for (int k = 1; k <= 7; ++k) expected.insert(migUuid(k));
  EXPECT_EQ(uuids, expected) << "seven ranks, seven instances, each its own";
  // The plan says what NCCL can and cannot do over MIG instances.
  EXPECT_NE(job.err.find("ranks on MIG instances: NCCL runs one communicator over them from 2.32"),
            std::string::npos)
      << job.err;
  // Given back with the job.
  EXPECT_TRUE(within20s([&] { return poolctl({"status"})["mig_instances"]["free"] == 7; }));
  // Eight never fit.
  ProcessResult eight = runShell("env POOLRUN_TOKEN=tok-bob-0123456789 " + std::string(POOLCTL_BINARY) +
                                 " --pool " + poold->uri() + " acquire --mig 1g.10gb -n 8");
  EXPECT_NE(eight.status, 0);
  EXPECT_NE(eight.err.find("8 MIG instances 1g.10gb can never be satisfied"), std::string::npos) << eight.err;
}

TEST_F(MigPoolTest, ALayoutTheAgentReportsIsLeasedAndAGoneInstanceEndsItsLease) {
  json held = poolctl({"acquire", "--mig", "1g.10gb", "-n", "2", "--ttl", "120"});
  ASSERT_TRUE(held.is_object()) << held.dump();
  ASSERT_EQ(held["gpus"].size(), 2u);
  const std::string first = held["gpus"][0]["mig"], second = held["gpus"][1]["mig"];
  EXPECT_EQ(first, migUuid(1));
  // The administrator destroys the five free instances and makes two new ones: the agent reports
  // the layout, and the lease keeps its two.
  json layout = sevenSlices(2);
  for (const json& g : sevenSlices(2, 8)) {
    json moved = g;
    moved["id"] = g["id"].get<int>() + 5;
    moved["placement"] = g["placement"].get<int>() + 5;
    moved["compute_instances"][0]["index"] = g["compute_instances"][0]["index"].get<int>() + 5;
    layout.push_back(moved);
  }
  setLayout(layout);
  ASSERT_TRUE(within20s([&] {
    json now = instances();
    return now.size() == 4u && now[3]["uuid"] == migUuid(9);
  })) << instances().dump()
      << slurp(dir.path() / "agent-err");
  json leases = poolctl({"leases"});
  ASSERT_EQ(leases.size(), 1u);
  EXPECT_EQ(leases[0]["gpus"][0]["mig"], first);
  EXPECT_EQ(instances()[0]["lease"], held["id"]);
  json two = poolctl({"acquire", "--mig", "1g.10gb", "-n", "2", "--ttl", "120"});
  ASSERT_TRUE(two.is_object());
  EXPECT_EQ(two["gpus"][0]["mig"], migUuid(8));
  // An instance of the first lease is destroyed from under it: the lease ends, with why.
  json without = json::array({layout[1], layout[2], layout[3]});
  setLayout(without);
  ASSERT_TRUE(waitForInstances(3)) << instances().dump();
  EXPECT_TRUE(within20s([&] { return poolctl({"leases"}).size() == 1u; })) << poolctl({"leases"}).dump();
  ProcessResult renew = runShell("env POOLRUN_TOKEN=tok-root-0123456789 " + std::string(POOLCTL_BINARY) +
                                 " --pool " + poold->uri() + " renew " + held["id"].get<std::string>());
  EXPECT_NE(renew.status, 0);
  EXPECT_NE(renew.err.find("its MIG instance " + first + " (GPU0 of n01) is gone"), std::string::npos)
      << renew.err;
  EXPECT_EQ(agent->stop(seconds(10)), 0) << slurp(dir.path() / "agent-err");
}

// poolctl mig: the GPU takes no new lease at once, the layout waits for the lease that holds one of
// its instances, then the agent makes it through NVML and the new instances are leased. Without the
// privilege to make it, the GPU is failed with the reason.
TEST_F(MigPoolTest, RepartitioningWaitsForTheLeaseThenTheAgentMakesTheLayout) {
  json held = poolctl({"acquire", "--mig", "1g.10gb", "-n", "1", "--ttl", "120"});
  ASSERT_TRUE(held.is_object()) << held.dump();
  const std::string id = held["id"];
  const std::string env = "env POOLRUN_TOKEN=tok-root-0123456789 ";
  const std::string ctl = std::string(POOLCTL_BINARY) + " --pool " + poold->uri();
  std::filesystem::path out = dir.path() / "mig-out", err = dir.path() / "mig-err";
  Reaped waiting{spawnShell(env + ctl + " mig n01:0 --profiles 3g.40gb,3g.40gb --wait 40 >" + out.string() +
                            " 2>" + err.string())};
  ASSERT_TRUE(within20s([&] {
    json nodes = poolctl({"nodes"});
    return nodes.is_array() && nodes[0]["gpus"][0].contains("mig_layout_asked");
  }));
  // No new lease on the GPU meanwhile; the held instance is not taken from its holder.
  ProcessResult refused = runShell(env + ctl + " acquire --mig 1g.10gb -n 1 --wait 0");
  EXPECT_NE(refused.status, 0) << refused.out;
  std::this_thread::sleep_for(seconds(3));
  EXPECT_EQ(instances().size(), 7u) << "made while a lease holds an instance";
  EXPECT_EQ(poolctl({"leases"}).size(), 1u);

  ASSERT_EQ(runShell(env + ctl + " release " + id).status, 0);
  EXPECT_EQ(waiting.wait(), 0) << slurp(out) << slurp(err) << slurp(dir.path() / "agent-err");
  EXPECT_NE(slurp(out).find("n01:0: MIG layout 3g.40gb,3g.40gb made: 2 instances"), std::string::npos)
      << slurp(out);
  // The audit trail: who asked for the layout, how they were known, from where.
  std::string events;
  runProgram({POOLCTL_BINARY, "--pool", poold->uri(), "--token-file", admin, "--json", "events"}, &events);
  bool audited = false;
  std::istringstream lines(events);
  for (std::string line; std::getline(lines, line);) {
    const json e = json::parse(line, nullptr, false);
    audited = audited || (e.is_object() && e.value("kind", "") == "mig_layout_asked" &&
                          e.value("node", "") == "n01" && e.value("by", "") == "root" &&
                          e.value("auth", "") == "token" && e.value("from", "") == "127.0.0.1");
  }
  EXPECT_TRUE(audited) << events;
  json now = instances();
  ASSERT_EQ(now.size(), 2u) << now.dump();
  EXPECT_EQ(now[0]["profile"], "3g.40gb");
  json two = poolctl({"acquire", "--mig", "3g.40gb", "-n", "2", "--ttl", "60"});
  ASSERT_TRUE(two.is_object()) << "the new instances are leased";
  EXPECT_NE(slurp(dir.path() / "agent-err").find("GPU 0: MIG layout 3g.40gb,3g.40gb made"),
            std::string::npos);
  ASSERT_EQ(runShell(env + ctl + " release " + two["id"].get<std::string>()).status, 0);

  // Without root the layout cannot be made: the GPU is failed with why, and says what to do.
  setLayout(sevenSlices(7), false);
  ASSERT_TRUE(waitForInstances(7)) << instances().dump();
  ProcessResult failed = runShell(env + ctl + " mig n01:0 --profiles 7g.80gb --wait 40");
  EXPECT_EQ(failed.status, 1) << failed.out << failed.err;
  EXPECT_NE(failed.err.find("MIG layout 7g.80gb not made: cannot destroy a compute instance"),
            std::string::npos)
      << failed.err;
  EXPECT_NE(failed.err.find("needs root"), std::string::npos) << failed.err;
  json nodes = poolctl({"nodes"});
  EXPECT_EQ(nodes[0]["gpus"][0]["state"], "failed") << nodes.dump();
  EXPECT_EQ(poolctl({"status"})["mig_instances"]["unusable"], 7);
  // Bad requests never reach the agent.
  for (const char* bad :
       {"mig n01:0 --profiles 3g.40gb+", "mig n01:0 --profiles ''", "mig n01:99 --profiles 7g.80gb",
        "mig n01:1 --profiles 7g.80gb,7g.80gb,7g.80gb,7g.80gb,7g.80gb,7g.80gb,7g.80gb,7g.80gb,7g.80gb"}) {
    ProcessResult r = runShell(env + ctl + " " + bad);
    EXPECT_NE(r.status, 0) << bad;
    EXPECT_FALSE(r.err.empty()) << bad;
  }
  ProcessResult user =
      runShell("env POOLRUN_TOKEN=tok-bob-0123456789 " + ctl + " mig n01:0 --profiles 7g.80gb");
  EXPECT_NE(user.status, 0);
  EXPECT_NE(user.err.find("change MIG layouts"), std::string::npos) << user.err;
}

}  // namespace
}  // namespace poolrun::test
