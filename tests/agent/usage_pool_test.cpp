// The usage ledger on a live pool: a real poold (SQLite, or two replicas on a three-member etcd), a
// real agent of n01 on a fake NVML whose GPUs' energy counters the test raises by known amounts,
// heartbeats every second, --account-interval 10. Two owners' leases of known lengths: `poolctl
// usage` gives their GPU-seconds and the energy of their GPUs exactly, across a kill -9 of poold
// (SQLite) and of the leading replica (etcd), and `poolctl usage` as a table and CSV.

#include <gtest/gtest.h>
#include <httplib.h>

#include <cmath>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "agent_run.hpp"
#include "fake_nvml/fake_nvml_file.hpp"
#include "poold_process.hpp"
#include "poolrun/topo/sources.hpp"
#include "support/etcd_cluster.hpp"
#include "support/fixtures.hpp"
#include "support/process.hpp"
#include "support/temp_dir.hpp"

namespace poolrun::test {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr uint64_t kStartMj = 1'000'000'000;  // each GPU's counter when the test starts

class UsagePoolTest : public ::testing::TestWithParam<std::string> {
 protected:
  TempDir dir;
  json nvml;
  std::unique_ptr<PooldProcess> single;
  std::unique_ptr<EtcdCluster> etcd;
  std::unique_ptr<PooldReplicas> replicas;
  std::unique_ptr<AgentRun> agent;
  std::string uri;
  std::filesystem::path tokens;
  const std::vector<std::string> options{"--heartbeat-interval", "1", "--node-timeout", "3",
                                         "--account-interval",   "10"};

  void SetUp() override {
    if (GetParam() == "etcd") POOLRUN_TEST_REQUIRE_ETCD();
    const std::string topology = (sourceDir() / "topologies" / "hgx-h100-8gpu-8nic.xml").string();
    nvml = fakeNvmlFor(topo::readTopologyFile(topology));
    for (json& g : nvml["gpus"]) {
      g["utilization"] = {{"gpu", 40}, {"memory", 20}};
      g["total_energy_mj"] = kStartMj;
    }
    writeFakeNvml(dir.path() / "nvml.json", nvml);
    tokens = dir.writeSecret("tokens", std::string(kTokens) + "tok-node-n01-0123456789 n01 node\n");
    dir.writeSecret("token-n01", "tok-node-n01-0123456789\n");
    dir.writeSecret("alice", "tok-alice-0123456789\n");
    dir.writeSecret("bob", "tok-bob-0123456789\n");
    dir.writeSecret("root", "tok-root-0123456789\n");
    if (GetParam() == "etcd") {
      etcd = std::make_unique<EtcdCluster>(3);
      replicas = std::make_unique<PooldReplicas>(etcd->uri(), 2, dir.path(), tokens, options);
      uri = replicas->uri();
    } else {
      single = std::make_unique<PooldProcess>(dir.path() / "state", tokens, options);
      uri = single->uri();
    }
    std::filesystem::create_directories(dir.path() / "proc");
    agent = std::make_unique<AgentRun>(
        "--pool " + uri + " --token-file " + (dir.path() / "token-n01").string() +
            " --node n01 --interval 1 --from " + topology + " --proc-root " + (dir.path() / "proc").string(),
        dir.path() / "err-agent", fakeNvmlEnv(dir.path() / "nvml.json"));
    ASSERT_TRUE(waitUntil(seconds(20), [&] {
      const json nodes = poolctl("root", {"nodes"});
      return nodes.is_array() && !nodes.empty() && nodes[0]["last_heartbeat"].is_string();
    })) << slurp(dir.path() / "err-agent");
  }

  json poolctl(const std::string& who, const std::vector<std::string>& args, std::string* text = nullptr) {
    std::vector<std::string> argv{POOLCTL_BINARY, "--pool", uri, "--token-file", (dir.path() / who).string()};
    if (text == nullptr) argv.push_back("--json");
    argv.insert(argv.end(), args.begin(), args.end());
    std::string out;
    if (runProgram(argv, &out) != 0) return nullptr;
    if (text != nullptr) {
      *text = out;
      return json::object();
    }
    return json::parse(out, nullptr, false);
  }

  bool waitUntil(seconds limit, const std::function<bool()>& check) {
    const auto end = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < end) {
      if (check()) return true;
      std::this_thread::sleep_for(milliseconds(200));
    }
    return false;
  }

  // The report's line for `name` (null where it has none).
  json usageOf(const std::string& name, const std::string& by = "owner") {
    const json rows = poolctl("root", {"usage", "--by", by});
    if (rows.is_array())
      for (const json& r : rows)
        if (r.value("name", "") == name) return r;
    return nullptr;
  }

  // Raises the energy counter of each GPU in `gpus` by `mj`.
  void burn(const json& gpus, uint64_t mj) {
    for (const json& g : gpus) {
      json& counter = nvml["gpus"][g["index"].get<size_t>()]["total_energy_mj"];
      counter = counter.get<uint64_t>() + mj;
    }
    writeFakeNvml(dir.path() / "nvml.json", nvml);
  }

  // Kills the pool's poold (the leader, for replicas) and waits until one serves again.
  void killPoold() {
    if (single) {
      const int port = single->port();
      single->kill9();
      single = std::make_unique<PooldProcess>(dir.path() / "state", tokens, options, port);
      ASSERT_TRUE(single->waitServing());
      return;
    }
    const int leader = replicas->leader(seconds(5));
    ASSERT_GE(leader, 0);
    replicas->at(leader).kill9();
    ASSERT_GE(replicas->leader(seconds(20), leader), 0) << "no standby took over";
  }
};

TEST_P(UsagePoolTest, TwoOwnersUsageIsExactAcrossAKilledPoold) {
  const auto asked = std::chrono::system_clock::now();
  const json alice = poolctl("alice", {"acquire", "-n", "2", "--ttl", "3600"});
  const auto granted = std::chrono::system_clock::now();
  const json bob = poolctl("bob", {"acquire", "-n", "1", "--ttl", "3600"});
  ASSERT_TRUE(alice.is_object() && bob.is_object());
  // A heartbeat after the grant before the counters move: the span that carries them lies inside
  // the leases.
  std::this_thread::sleep_for(milliseconds(2500));
  burn(alice["gpus"], 5'000'000);  // 5 kJ on each of alice's GPUs
  burn(bob["gpus"], 7'000'000);
  ASSERT_TRUE(waitUntil(seconds(20),
                        [&] {
                          const json a = usageOf("alice"), b = usageOf("bob");
                          return a.is_object() && b.is_object() && a["energy_j"].get<double>() > 0 &&
                                 b["energy_j"].get<double>() > 0;
                        }))
      << usageOf("alice").dump() << slurp(dir.path() / "err-agent");
  EXPECT_NEAR(usageOf("alice")["energy_j"].get<double>(), 10'000, 1e-6) << "the counters' growth, exactly";
  EXPECT_NEAR(usageOf("bob")["energy_j"].get<double>(), 7'000, 1e-6);
  EXPECT_GT(usageOf("alice")["used_s"].get<double>(), 0) << "40% utilisation integrated";
  if (single) {  // /metrics' counters from the ledger
    httplib::Client c("127.0.0.1", single->port());
    auto r = c.Get("/metrics", {{"Authorization", "Bearer tok-root-0123456789"}});
    ASSERT_TRUE(r && r->status == 200);
    EXPECT_NE(r->body.find("poolrun_gpu_energy_joules_total{owner=\"alice\"} 10000.000\n"), std::string::npos)
        << r->body;
    EXPECT_NE(r->body.find("poolrun_gpu_used_seconds_total{owner=\"bob\"} "), std::string::npos) << r->body;
  }

  // Past an accounting interval, poold dies; what it stored is there after the restart (or on the
  // replica that takes over), and the leases, still held, count on.
  std::this_thread::sleep_for(seconds(11));
  const double usedBefore = usageOf("alice")["used_s"].get<double>();
  killPoold();
  const json after = usageOf("alice");
  ASSERT_TRUE(after.is_object()) << poolctl("root", {"usage"}).dump();
  EXPECT_NEAR(after["energy_j"].get<double>(), 10'000, 1e-6);
  EXPECT_NEAR(usageOf("bob")["energy_j"].get<double>(), 7'000, 1e-6);
  EXPECT_GE(after["used_s"].get<double>(), usedBefore - 2 * 10 * 0.4 - 1e-9)
      << "at most an interval of use is lost";

  // alice releases: her GPU-seconds are her lease's length, between what the test saw of its start
  // and end.
  const auto releasing = std::chrono::system_clock::now();
  ASSERT_FALSE(poolctl("alice", {"release", alice["id"].get<std::string>()}).is_null());
  const auto released = std::chrono::system_clock::now();
  const double allocated = usageOf("alice")["allocated_s"].get<double>();
  EXPECT_LE(allocated, 2 * std::chrono::duration<double>(released - asked).count());
  EXPECT_GE(allocated, 2 * std::chrono::duration<double>(releasing - granted).count());
  EXPECT_EQ(usageOf("alice")["leases"], 1);
  EXPECT_NEAR(usageOf("n01", "node")["energy_j"].get<double>(), 17'000, 1e-6);

  std::string table;
  poolctl("bob", {"usage"}, &table);
  EXPECT_NE(table.find("OWNER"), std::string::npos) << table;
  EXPECT_NE(table.find("alice"), std::string::npos) << table;
  EXPECT_NE(table.find("TOTAL"), std::string::npos) << table;
  std::string csv;
  poolctl("bob", {"usage", "--by", "gpu-model", "--format", "csv"}, &csv);
  EXPECT_TRUE(csv.starts_with("gpu_model,leases,allocated_gpu_hours,")) << csv;
  // The topology file the agent reads names no model: the one line has both leases.
  EXPECT_NE(csv.find("\n,2,"), std::string::npos) << csv;
  // A range before the leases holds nothing; a range that ends before it starts is refused.
  const json none = poolctl("root", {"usage", "--since", "2020-01-01", "--until", "2020-01-02"});
  EXPECT_EQ(none, json::array()) << none.dump();
  EXPECT_TRUE(poolctl("root", {"usage", "--since", "1h", "--until", "2h"}).is_null());
}

INSTANTIATE_TEST_SUITE_P(Stores, UsagePoolTest, ::testing::Values("sqlite", "etcd"),
                         [](const auto& store) { return store.param; });

}  // namespace
}  // namespace poolrun::test
