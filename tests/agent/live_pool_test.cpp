// The live pool on one machine: a real poold and three real agents (n01-n03, each with its own fake
// NVML file and /proc folder), heartbeats every second, a node timeout of 3 s, idle leases after
// 4 s reclaimed 2 s after their warning. A killed agent makes its node unreachable and placement
// avoids it until it is back; an ECC error in the fake fails its GPU; a process of no lease makes
// its GPU foreign; an idle job's lease is reclaimed, its poolrun says so and ends with 126, and the
// queued request then starts.

#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>

#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "agent_run.hpp"
#include "fake_nvml/fake_nvml_file.hpp"
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

const char* const kNodes[] = {"n01", "n02", "n03"};

std::string fixtureTopology() {
  return (sourceDir() / "topologies" / "hgx-h100-8gpu-8nic.xml").string();
}

// Kills a spawned shell's process group however the test ends.
struct Spawned {
  pid_t pid = -1;
  ~Spawned() {
    if (pid > 0) {
      kill(-pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
  int wait(seconds limit) {
    int status = waitExit(pid, limit);
    pid = -1;
    return status;
  }
};

class LivePoolTest : public ::testing::Test {
 protected:
  TempDir dir;
  std::filesystem::path tokens;
  std::string admin;
  std::unique_ptr<PooldProcess> poold;
  std::map<std::string, json> nvml;  // per node: its fake NVML document
  std::map<std::string, std::unique_ptr<AgentRun>> agents;

  void SetUp() override {
    std::string lines = std::string(kTokens);
    for (const char* n : kNodes) {
      lines += std::string("tok-node-") + n + "-0123456789 " + n + " node\n";
      dir.writeSecret(std::string("token-") + n, std::string("tok-node-") + n + "-0123456789\n");
      std::filesystem::create_directories(dir.path() / (std::string("proc-") + n));
      nvml[n] = fakeNvmlFor(topo::readTopologyFile(fixtureTopology()));
      for (json& g : nvml[n]["gpus"]) g["utilization"] = {{"gpu", 60}, {"memory", 30}};  // busy
      writeFakeNvml(nvmlFile(n), nvml[n]);
    }
    tokens = dir.writeSecret("tokens", lines);
    admin = dir.writeSecret("admin", "tok-root-0123456789\n").string();
    poold = std::make_unique<PooldProcess>(
        dir.path() / "state", tokens,
        std::vector<std::string>{"--heartbeat-interval", "1", "--node-timeout", "3", "--idle-after", "4",
                                 "--idle-utilization", "5", "--reclaim-idle", "--reclaim-grace", "2"});
    for (const char* n : kNodes) startAgent(n);
    ASSERT_TRUE(waitFor([&](const json& nodes) {
      int up = 0;
      for (const json& node : nodes) up += node["state"] == "up" && node["last_heartbeat"].is_string();
      return up == 3;
    })) << poolctl({"nodes"}).dump()
        << agentErrors();
  }

  std::filesystem::path nvmlFile(const std::string& node) { return dir.path() / ("nvml-" + node + ".json"); }

  void startAgent(const std::string& node, const std::string& more = "") {
    agents[node] = std::make_unique<AgentRun>(
        "--pool " + poold->uri() + " --token-file " + (dir.path() / ("token-" + node)).string() + " --node " +
            node + " --interval 1 --from " + fixtureTopology() + " --proc-root " +
            (dir.path() / ("proc-" + node)).string() + more,
        dir.path() / ("err-" + node), fakeNvmlEnv(nvmlFile(node)));
  }

  std::string agentErrors() {
    std::string out;
    for (const char* n : kNodes) out += std::string(n) + ": " + slurp(dir.path() / (std::string("err-") + n));
    return out;
  }

  json poolctl(const std::vector<std::string>& args) {
    std::vector<std::string> argv{POOLCTL_BINARY, "--pool", poold->uri(), "--token-file", admin, "--json"};
    argv.insert(argv.end(), args.begin(), args.end());
    std::string out;
    if (runProgram(argv, &out) != 0) return nullptr;
    return json::parse(out, nullptr, false);
  }

  json node(const std::string& name) {
    json nodes = poolctl({"nodes"});
    if (nodes.is_array())
      for (const json& n : nodes)
        if (n.value("name", "") == name) return n;
    return nullptr;
  }

  // Waits until `check` holds of `poolctl nodes --json`, up to 20 s.
  bool waitFor(const std::function<bool(const json&)>& check) {
    auto end = std::chrono::steady_clock::now() + seconds(20);
    while (std::chrono::steady_clock::now() < end) {
      json nodes = poolctl({"nodes"});
      if (nodes.is_array() && check(nodes)) return true;
      std::this_thread::sleep_for(milliseconds(200));
    }
    return false;
  }

  bool waitForNode(const std::string& name, const std::function<bool(const json&)>& check) {
    return waitFor([&](const json& nodes) {
      for (const json& n : nodes)
        if (n.value("name", "") == name) return check(n);
      return false;
    });
  }

  void setUtilization(const std::string& node, int percent) {
    for (json& g : nvml[node]["gpus"]) g["utilization"] = {{"gpu", percent}, {"memory", percent / 2}};
    writeFakeNvml(nvmlFile(node), nvml[node]);
  }
};

TEST_F(LivePoolTest, AKilledAgentMakesItsNodeUnreachableAndPlacementAvoidsItUntilItIsBack) {
  agents["n02"]->kill9();
  ASSERT_TRUE(waitForNode("n02", [](const json& n) { return n["state"] == "unreachable"; }))
      << node("n02").dump();
  json status = poolctl({"status"});
  EXPECT_EQ(status["nodes"]["unreachable"], 1) << status.dump();
  EXPECT_EQ(status["gpus"]["unreachable"], 8) << status.dump();

  // 16 GPUs as 8 per node: n01 and n03, never n02.
  json lease = poolctl({"acquire", "-n", "16", "--gpus-per-node", "8", "--wait", "0", "--ttl", "120"});
  ASSERT_TRUE(lease.is_object()) << lease.dump();
  for (const json& g : lease["gpus"]) EXPECT_NE(g["node"], "n02") << lease.dump();
  EXPECT_TRUE(poolctl({"acquire", "-n", "8", "--wait", "0"}).is_null()) << "n02's GPUs are not placed";

  startAgent("n02");
  ASSERT_TRUE(waitForNode("n02", [](const json& n) { return n["state"] == "up"; })) << node("n02").dump();
  json more = poolctl({"acquire", "-n", "8", "--wait", "0", "--ttl", "120"});
  ASSERT_TRUE(more.is_object()) << "n02 is placed again";
  EXPECT_EQ(more["gpus"][0]["node"], "n02") << more.dump();

  std::string events;
  runProgram({POOLCTL_BINARY, "--pool", poold->uri(), "--token-file", admin, "events"}, &events);
  EXPECT_NE(events.find("n02"), std::string::npos) << events;
  EXPECT_NE(events.find("unreachable"), std::string::npos) << events;
}

TEST_F(LivePoolTest, AnEccErrorFailsTheGpuAndAProcessOfNoLeaseMakesItForeign) {
  nvml["n03"]["gpus"][5]["ecc_uncorrected_volatile"] = 3;
  nvml["n03"]["gpus"][6]["processes"] = {{{"pid", 999999}, {"used_memory_bytes", 1 << 30}}};
  writeFakeNvml(nvmlFile("n03"), nvml["n03"]);
  ASSERT_TRUE(waitForNode("n03", [](const json& n) {
    return n["gpus"][5]["state"] == "failed" && n["gpus"][6]["state"] == "foreign";
  })) << node("n03").dump();
  json n03 = node("n03");
  EXPECT_NE(n03["gpus"][5]["failed_reason"].get<std::string>().find("3 uncorrectable ECC errors"),
            std::string::npos)
      << n03.dump();
  EXPECT_TRUE(n03["gpus"][5]["failed_at"].is_string());
  EXPECT_EQ(n03["gpus"][6]["foreign_processes"][0]["pid"], 999999) << n03.dump();
  json status = poolctl({"status"});
  EXPECT_EQ(status["gpus"]["failed"], 1) << status.dump();
  EXPECT_EQ(status["gpus"]["foreign"], 1) << status.dump();
  EXPECT_TRUE(poolctl({"acquire", "-n", "23", "--wait", "0"}).is_null()) << "22 GPUs are placeable";

  // The administrator resumes the node: the failure is cleared, the count it had accepted; the
  // foreign process stays foreign while it runs.
  ASSERT_FALSE(poolctl({"resume", "n03"}).is_null());
  ASSERT_TRUE(waitForNode("n03", [](const json& n) { return n["gpus"][5]["state"] == "free"; }))
      << node("n03").dump();
  EXPECT_EQ(node("n03")["gpus"][6]["state"], "foreign");
}

// The agent's health checks (the doctor's, every second here) find a GPU whose row remapping failed:
// poold drains the node with what failed; once the GPU is replaced (the fake NVML fixed), they pass
// and the node is resumed. A node an administrator drained stays drained whatever they say.
TEST_F(LivePoolTest, AFailingHealthCheckDrainsTheNodeAndFixingItResumesIt) {
  agents["n02"].reset();
  startAgent("n02", " --health-interval 1");
  ASSERT_TRUE(waitFor([&](const json&) {
    return slurp(dir.path() / "err-n02").find("health checks pass") != std::string::npos;
  })) << agentErrors();
  nvml["n02"]["gpus"][2]["remapped_rows"] = {{"failure", true}};
  writeFakeNvml(nvmlFile("n02"), nvml["n02"]);
  ASSERT_TRUE(waitForNode("n02", [](const json& n) { return n["state"] == "draining"; }))
      << node("n02").dump() << agentErrors();
  const std::string reason = node("n02").value("drain_reason", "");
  EXPECT_TRUE(reason.starts_with("health check failed: gpu.retired_pages GPU2 ")) << reason;
  EXPECT_NE(reason.find("a row remapping failed"), std::string::npos) << reason;
  std::string table;
  runProgram({POOLCTL_BINARY, "--pool", poold->uri(), "--token-file", admin, "nodes"}, &table);
  EXPECT_NE(table.find("  drained by its agent: health check failed: gpu.retired_pages GPU2 "),
            std::string::npos)
      << table;
  EXPECT_TRUE(poolctl({"acquire", "-n", "17", "--wait", "0"}).is_null()) << "n02 takes no new lease";
  EXPECT_NE(slurp(dir.path() / "err-n02").find("health checks fail: gpu.retired_pages GPU2 "),
            std::string::npos)
      << agentErrors();

  nvml["n02"]["gpus"][2].erase("remapped_rows");
  writeFakeNvml(nvmlFile("n02"), nvml["n02"]);
  ASSERT_TRUE(waitForNode("n02", [](const json& n) { return n["state"] == "up"; })) << node("n02").dump();
  EXPECT_FALSE(node("n02").contains("drain_reason")) << node("n02").dump();
  std::string events;
  runProgram({POOLCTL_BINARY, "--pool", poold->uri(), "--token-file", admin, "--json", "events"}, &events);
  EXPECT_NE(events.find("health checks"), std::string::npos) << events;

  // An administrator's drain: the checks pass, and it stays.
  ASSERT_FALSE(poolctl({"drain", "n02"}).is_null());
  std::this_thread::sleep_for(seconds(3));
  EXPECT_EQ(node("n02")["state"], "draining") << node("n02").dump();
}

TEST_F(LivePoolTest, AnIdleJobIsReclaimedItsPoolrunEndsWith126AndTheQueuedRequestStarts) {
  // A busy lease on two nodes, and a poolrun job on the third whose GPUs idle.
  json busy = poolctl({"acquire", "-n", "16", "--gpus-per-node", "8", "--ttl", "120"});
  ASSERT_TRUE(busy.is_object()) << busy.dump();
  std::string idleNode;
  for (const char* n : kNodes) {
    bool taken = false;
    for (const json& g : busy["gpus"]) taken |= g["node"] == n;
    if (!taken) idleNode = n;
  }
  ASSERT_FALSE(idleNode.empty());
  setUtilization(idleNode, 0);

  std::filesystem::path jobErr = dir.path() / "job-err";
  Spawned job{
      spawnShell("env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
                 "POOLRUN_TOKEN=tok-alice-0123456789 POOLRUN_STATE_DIR=" +
                 (dir.path() / "client").string() + " timeout 120 " + POOLRUN_BINARY + " --pool " +
                 poold->uri() + " --simulate -n 8 --gpus-per-node 8 --lease-ttl 6 sleep 100 >" +
                 (dir.path() / "job-out").string() + " 2>" + jobErr.string())};
  ASSERT_TRUE(waitForText(jobErr, "is idle", seconds(40))) << slurp(jobErr);

  // Queued meanwhile: waits for the idle job's GPUs.
  std::filesystem::path queuedOut = dir.path() / "queued-out";
  Spawned queued{spawnShell("env POOLRUN_TOKEN=tok-bob-0123456789 timeout 60 " + std::string(POOLCTL_BINARY) +
                            " --pool " + poold->uri() + " --json acquire -n 8 --wait 50 --ttl 60 >" +
                            queuedOut.string() + " 2>&1")};

  EXPECT_EQ(job.wait(seconds(40)), 126) << slurp(jobErr);
  std::string err = slurp(jobErr);
  EXPECT_NE(err.find("poolrun: warning: lease L"), std::string::npos) << err;
  EXPECT_NE(err.find("the pool reclaims it at "), std::string::npos) << err;
  EXPECT_NE(err.find("was reclaimed: its GPUs were idle"), std::string::npos) << err;

  EXPECT_EQ(queued.wait(seconds(40)), 0) << slurp(queuedOut);
  json granted = json::parse(slurp(queuedOut), nullptr, false);
  ASSERT_TRUE(granted.is_object()) << slurp(queuedOut);
  EXPECT_EQ(granted["gpus"][0]["node"], idleNode) << granted.dump();
  json leases = poolctl({"leases"});
  EXPECT_EQ(leases.size(), 2u) << "the busy one and the queued one: " << leases.dump();
}

TEST_F(LivePoolTest, MetricsCarryEveryGpuOfTheAgentsAndPassPromtool) {
  json lease = poolctl({"acquire", "-n", "8", "--gpus-per-node", "8", "--ttl", "120"});
  ASSERT_TRUE(lease.is_object()) << lease.dump();
  const std::string held = lease["gpus"][0]["node"];
  nvml["n01"]["gpus"][2]["xid_events"] = {{{"seq", 1}, {"xid", 13}}};
  writeFakeNvml(nvmlFile("n01"), nvml["n01"]);
  httplib::Client http("127.0.0.1", poold->port());
  std::string m;
  auto end = std::chrono::steady_clock::now() + seconds(20);
  while (std::chrono::steady_clock::now() < end) {
    auto r = http.Get("/metrics", {{"Authorization", "Bearer tok-root-0123456789"}});
    ASSERT_TRUE(r && r->status == 200);
    m = r->body;
    if (m.find("xid=\"13\"") != std::string::npos) break;
    std::this_thread::sleep_for(milliseconds(200));
  }
  const std::string gpu0 = "node=\"" + held + "\",gpu=\"0\",uuid=\"GPU-fake-0000-0000\",lease=\"" +
                           lease["id"].get<std::string>() + "\",owner=\"root\"";
  EXPECT_NE(m.find("poolrun_gpu_utilization_ratio{" + gpu0 + "} 0.6\n"), std::string::npos) << m;
  EXPECT_NE(m.find("poolrun_gpu_temperature_celsius{" + gpu0 + "} 35\n"), std::string::npos) << m;
  EXPECT_NE(m.find("poolrun_gpu_power_watts{" + gpu0 + "} 70\n"), std::string::npos) << m;
  EXPECT_NE(m.find("poolrun_gpu_memory_total_bytes{" + gpu0 + "} 85899345920\n"), std::string::npos) << m;
  EXPECT_NE(m.find("poolrun_gpu_xid_errors_total{node=\"n01\",gpu=\"2\",xid=\"13\"} 1\n"), std::string::npos)
      << m;
  for (const char* n : kNodes)
    EXPECT_NE(m.find(std::string("poolrun_node_heartbeat_age_seconds{node=\"") + n + "\"}"),
              std::string::npos)
        << m;
  EXPECT_NE(m.find("poolrun_gpus{state=\"leased\"} 8\n"), std::string::npos) << m;
  EXPECT_NE(m.find("poolrun_gpus{state=\"foreign\"} 0\n"), std::string::npos) << m;
  if (runShell("command -v promtool").status != 0)
    GTEST_SKIP() << "promtool not found: install Debian's prometheus package (scripts/setup-deps.sh)";
  std::filesystem::path file = dir.write("metrics.txt", m);
  ProcessResult r = runShell("promtool check metrics < " + file.string());
  EXPECT_EQ(r.status, 0) << r.out << r.err;
}

}  // namespace
}  // namespace poolrun::test
