// MPS shares in the live pool, on one machine: a real poold, a real agent (fake NVML, and a fake
// nvidia-cuda-mps-control given as its --mps-control, tests/agent/fake-mps-control), and a
// `poolrun --share 0.25 -n 2` job on the simulated node. The agent starts a daemon for each GPU with
// shares, the ranks wait for it and get the MPS variables, and the daemons stop when the shares end.
// A daemon that will not start fails its GPU with the reason.

#include <gtest/gtest.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <set>
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

class MpsPoolTest : public ::testing::Test {
 protected:
  TempDir dir;
  std::unique_ptr<PooldProcess> poold;
  std::unique_ptr<AgentRun> agent;
  std::string admin;

  void start(const std::string& agentEnv = "") {
    dir.writeSecret("token-n01", "tok-node-n01-0123456789\n");
    std::filesystem::path tokens =
        dir.writeSecret("tokens", std::string(kTokens) + "tok-node-n01-0123456789 n01 node\n");
    admin = dir.writeSecret("admin", "tok-root-0123456789\n").string();
    std::filesystem::create_directories(dir.path() / "proc");
    writeFakeNvml(dir.path() / "nvml.json", fakeNvmlFor(topo::readTopologyFile(hgxNodeTopology())));
    poold = std::make_unique<PooldProcess>(dir.path() / "state", tokens,
                                           std::vector<std::string>{"--heartbeat-interval", "1"});
    agent = std::make_unique<AgentRun>(
        "--pool " + poold->uri() + " --token-file " + (dir.path() / "token-n01").string() +
            " --node n01 --interval 1 --from " + hgxNodeTopology() + " --proc-root " +
            (dir.path() / "proc").string() + " --mps-dir " + mpsDir().string() + " --mps-control " +
            (sourceDir() / "tests" / "agent" / "fake-mps-control").string(),
        dir.path() / "agent-err",
        fakeNvmlEnv(dir.path() / "nvml.json") + " FAKE_MPS_LOG=" + (dir.path() / "mps-log").string() + " " +
            agentEnv + " ");
    ASSERT_TRUE(within20s([&] {
      json nodes = poolctl({"nodes"});
      return nodes.is_array() && nodes.size() == 1;
    })) << slurp(dir.path() / "agent-err");
  }

  void TearDown() override {
    if (agent) {
      EXPECT_EQ(agent->stop(seconds(10)), 0) << slurp(dir.path() / "agent-err");
    }
    // No daemon left running: each one the agent started was stopped, or is stopped here.
    for (int gpu = 0; gpu < 8; ++gpu) {
      std::filesystem::path pid = mpsDir() / ("gpu" + std::to_string(gpu)) / "nvidia-cuda-mps-control.pid";
      if (std::filesystem::exists(pid)) runShell("kill $(cat " + pid.string() + ") 2>/dev/null");
    }
  }

  std::filesystem::path mpsDir() { return dir.path() / "mps"; }

  json poolctl(const std::vector<std::string>& args, const std::string& token = "") {
    std::vector<std::string> argv{POOLCTL_BINARY, "--pool", poold->uri(), "--json"};
    if (token.empty()) {
      argv.insert(argv.end(), {"--token-file", admin});
    }
    argv.insert(argv.end(), args.begin(), args.end());
    std::string out;
    if (!token.empty()) {
      ProcessResult r = runShell("env POOLRUN_TOKEN=" + token + " " + joinArgs(argv));
      return r.status == 0 ? json::parse(r.out, nullptr, false) : json(nullptr);
    }
    if (runProgram(argv, &out) != 0) return nullptr;
    return json::parse(out, nullptr, false);
  }

  static std::string joinArgs(const std::vector<std::string>& argv) {
    std::string out;
    for (const std::string& a : argv) out += (out.empty() ? "" : " ") + a;
    return out;
  }

  size_t daemonsRunning() {
    size_t n = 0;
    for (int gpu = 0; gpu < 8; ++gpu)
      n += std::filesystem::exists(mpsDir() / ("gpu" + std::to_string(gpu)) / "nvidia-cuda-mps-control.pid");
    return n;
  }
};

TEST_F(MpsPoolTest, AShareJobsRanksAreClientsOfTheirGpusDaemons) {
  start();
  json nodes = poolctl({"nodes"});
  std::filesystem::path ranks = dir.path() / "ranks";
  std::filesystem::create_directories(ranks);
  ProcessResult job = runShell(
      "env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 POOLRUN_TOKEN=tok-alice-0123456789 "
      "POOLRUN_MPS_DIR=" +
      mpsDir().string() + " POOLRUN_STATE_DIR=" + (dir.path() / "client").string() + " timeout 120 " +
      POOLRUN_BINARY + " --pool " + poold->uri() +
      " --simulate --share 0.25 -n 2 --no-doctor sh -c 'echo "
      "\"$CUDA_VISIBLE_DEVICES|$CUDA_MPS_PIPE_DIRECTORY|"
      "$CUDA_MPS_ACTIVE_THREAD_PERCENTAGE|$CUDA_MPS_PINNED_DEVICE_MEM_LIMIT\" > " +
      ranks.string() + "/$RANK'");
  ASSERT_EQ(job.status, 0) << job.out << job.err << slurp(dir.path() / "agent-err");
  std::set<std::string> pipes;
  for (int r = 0; r < 2; ++r) {
    std::string line = slurp(ranks / std::to_string(r));
    ASSERT_FALSE(line.empty()) << "rank " << r << " wrote nothing: " << job.err;
    std::vector<std::string> f;
    for (size_t at = 0, bar; at <= line.size(); at = bar + 1) {
      bar = line.find_first_of("|\n", at);
      if (bar == std::string::npos) bar = line.size();
      f.push_back(line.substr(at, bar - at));
    }
    ASSERT_GE(f.size(), 4u) << line;
    const std::string gpu = f[1].substr(f[1].rfind("/gpu") + 4);
    const json& g = nodes[0]["gpus"][std::stoi(gpu)];
    EXPECT_EQ(f[1], (mpsDir() / ("gpu" + gpu)).string());
    EXPECT_EQ(f[2], "25");
    // A quarter of the GPU's memory (the topology file has none: NVML's, as the agent said).
    EXPECT_EQ(f[3], "0=" + std::to_string((g["memory_total_bytes"].get<uint64_t>() * 25 / 100) >> 20) + "M")
        << line;
    // The rank names its GPU as the agent named it to the GPU's daemon (the topology file has no
    // UUIDs: by index).
    EXPECT_NE(slurp(dir.path() / "mps-log").find("start " + f[0] + " " + f[1] + " "), std::string::npos)
        << f[0] << "\n"
        << slurp(dir.path() / "mps-log");
    pipes.insert(f[1]);
  }
  EXPECT_EQ(pipes.size(), 2u) << "one share of the job per GPU";
  // The agent started both daemons, each on its own GPU, and stops them once the shares are gone.
  const std::string log = slurp(dir.path() / "mps-log");
  for (const std::string& pipe : pipes)
    EXPECT_NE(log.find(" " + pipe + " " + pipe + "/log"), std::string::npos) << log;
  EXPECT_TRUE(within20s([&] { return daemonsRunning() == 0; })) << slurp(dir.path() / "agent-err");
  EXPECT_NE(slurp(dir.path() / "mps-log").find("quit "), std::string::npos);
  EXPECT_NE(slurp(dir.path() / "agent-err").find("MPS control daemon stopped (no share left)"),
            std::string::npos);
}

TEST_F(MpsPoolTest, SharesOfOneOwnerArePackedAndAnothersGoElsewhere) {
  start();
  json a = poolctl({"acquire", "-n", "1", "--share", "0.5", "--ttl", "120"}, "tok-alice-0123456789");
  json b = poolctl({"acquire", "-n", "1", "--share", "50%", "--ttl", "120"}, "tok-alice-0123456789");
  json c = poolctl({"acquire", "-n", "1", "--gpu-memory", "8G", "--ttl", "120"}, "tok-bob-0123456789");
  ASSERT_TRUE(a.is_object() && b.is_object() && c.is_object());
  EXPECT_EQ(a["gpus"][0]["index"], b["gpus"][0]["index"]);
  EXPECT_NE(a["gpus"][0]["index"], c["gpus"][0]["index"]) << "MPS serves one user's clients on a GPU";
  EXPECT_EQ(c["gpus"][0]["share"]["memory_bytes"], uint64_t{8} << 30);
  json status = poolctl({"status"});
  EXPECT_EQ(status["mps"]["gpus"], 2) << status.dump();
  EXPECT_EQ(status["mps"]["shares"], 3);
  EXPECT_TRUE(within20s([&] { return daemonsRunning() == 2; })) << slurp(dir.path() / "agent-err");
  // poolctl nodes and the plain listing show each share under its GPU.
  json nodes = poolctl({"nodes"});
  const json& shared = nodes[0]["gpus"][a["gpus"][0]["index"].get<int>()];
  ASSERT_EQ(shared["mps_shares"].size(), 2u) << shared.dump();
  ProcessResult plain = runShell("env POOLRUN_TOKEN=tok-root-0123456789 " + std::string(POOLCTL_BINARY) +
                                 " --pool " + poold->uri() + " nodes");
  EXPECT_NE(plain.out.find("MPS 50% of the SMs"), std::string::npos) << plain.out;
  ProcessResult top = runShell("env POOLRUN_TOKEN=tok-root-0123456789 " + std::string(POOLCTL_BINARY) +
                               " --pool " + poold->uri() + " status");
  EXPECT_NE(top.out.find("3 MPS shares on 2 GPUs"), std::string::npos) << top.out;
  // A whole GPU request for all eight waits: two are shared.
  ProcessResult whole = runShell("env POOLRUN_TOKEN=tok-bob-0123456789 " + std::string(POOLCTL_BINARY) +
                                 " --pool " + poold->uri() + " acquire -n 8 --wait 0");
  EXPECT_NE(whole.status, 0);
  for (const json& l : {a, b, c})
    EXPECT_EQ(runShell("env POOLRUN_TOKEN=tok-root-0123456789 " + std::string(POOLCTL_BINARY) + " --pool " +
                       poold->uri() + " release " + l["id"].get<std::string>())
                  .status,
              0);
  EXPECT_TRUE(within20s([&] { return daemonsRunning() == 0; })) << slurp(dir.path() / "agent-err");
}

TEST_F(MpsPoolTest, ADaemonThatWillNotStartFailsItsGpuWithWhy) {
  start("FAKE_MPS_FAIL='MPS is not supported on this GPU'");
  json a = poolctl({"acquire", "-n", "1", "--share", "0.25", "--ttl", "120"}, "tok-alice-0123456789");
  ASSERT_TRUE(a.is_object());
  const int gpu = a["gpus"][0]["index"];
  ASSERT_TRUE(within20s([&] { return poolctl({"nodes"})[0]["gpus"][gpu]["state"] == "failed"; }))
      << slurp(dir.path() / "agent-err");
  const std::string reason = poolctl({"nodes"})[0]["gpus"][gpu]["failed_reason"];
  EXPECT_NE(reason.find("MPS control daemon not started: "), std::string::npos) << reason;
  EXPECT_NE(reason.find("exited with status 1: MPS is not supported on this GPU"), std::string::npos)
      << reason;
  // The next share goes to another GPU.
  json b = poolctl({"acquire", "-n", "1", "--share", "0.25", "--ttl", "120"}, "tok-alice-0123456789");
  ASSERT_TRUE(b.is_object());
  EXPECT_NE(b["gpus"][0]["index"], gpu);
}

}  // namespace
}  // namespace poolrun::test
