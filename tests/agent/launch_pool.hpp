#pragma once

// The frame of the tests and benchmark of ranks started by the pool's own agents (docs/launch.md):
// a real poold, two real agents (nodes n01 and n02 on this machine, each with its launch port,
// --simulated-node, and cgroups of its own), and a user the test makes.

#include <httplib.h>

#include "jobs_pool.hpp"

namespace poolrun::test {

class LaunchPoolTest : public JobsPoolTest {
 protected:
  std::unique_ptr<AgentRun> second;  // node n02's agent, with the administrator's token

  std::string agentOptions() const override { return " --launch-listen 127.0.0.1:0 --simulated-node"; }

  void SetUp() override {
    JobsPoolTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    std::string args = agentArgs;
    for (auto [from, to] : {std::pair<std::string, std::string>{"--node n01", "--node n02"},
                            {(dir.path() / "token-n01").string(), admin},
                            {(dir.path() / "jobs").string(), (dir.path() / "jobs2").string()},
                            // Two nodes on one machine: their leases' cgroups apart, as on two machines.
                            {"--cgroup-parent " + cgroupParent, "--cgroup-parent " + cgroupParent + "-n02"}})
      args.replace(args.find(from), from.size(), to);
    secondArgs = args;
    startSecond();
  }

  std::string secondArgs;
  // Starts node n02's agent (again) and waits until it has registered.
  void startSecond() {
    second.reset();
    std::filesystem::remove(dir.path() / "agent2-err");
    second = std::make_unique<AgentRun>(secondArgs, dir.path() / "agent2-err",
                                        fakeNvmlEnv(dir.path() / "nvml.json"));
    for (auto end = std::chrono::steady_clock::now() + seconds(30); std::chrono::steady_clock::now() < end;) {
      if (slurp(dir.path() / "agent2-err").find("registered node n02") != std::string::npos &&
          poolctl("--json nodes").find("\"n02\"") != std::string::npos)
        return;
      std::this_thread::sleep_for(milliseconds(50));
    }
    FAIL() << "node n02 never registered: " << slurp(dir.path() / "agent2-err");
  }

  void TearDown() override {
    second.reset();
    for (const char* hierarchy : {"devices", "freezer", "pids", "memory", "unified"})
      runShell(
          "d=/sys/fs/cgroup/" + std::string(hierarchy) + "/" + cgroupParent +
          "-n02; [ -d $d ] && for i in $(seq 100); do rmdir $d/* $d 2>/dev/null; [ -d $d ] || break; sleep "
          "0.05; done");
    JobsPoolTest::TearDown();
  }

  // A lease of `gpus` GPUs for the test's user, and the launch credentials of its nodes (the reply
  // of POST /v1/leases/ID/launch).
  json leaseAndCredentials(int gpus) {
    httplib::Client http("127.0.0.1", poold->port());
    const httplib::Headers auth = {{"Authorization", "Bearer tok-" + user + "-0123456789"}};
    auto got = http.Post("/v1/leases", auth, json{{"gpus", gpus}, {"ttl_s", 120}}.dump(), "application/json");
    EXPECT_TRUE(got && got->status == 200) << (got ? got->body : "no reply");
    const std::string lease = json::parse(got->body)["lease"]["id"].get<std::string>();
    auto launch = http.Post("/v1/leases/" + lease + "/launch", auth, "", "application/json");
    EXPECT_TRUE(launch && launch->status == 200) << (launch ? launch->body : "no reply");
    auto other = http.Post("/v1/leases/" + lease + "/launch",
                           {{"Authorization", "Bearer tok-node-n01-0123456789"}}, "", "application/json");
    EXPECT_TRUE(other && other->status == 403)
        << "a node's token is not the lease's owner: " << (other ? other->body : "no reply");
    return json::parse(launch->body);
  }

  void expectAJobStartedAndConfinedByTheAgents();

  // poolrun-rsh for node `host` with the launch file `file` (its nodes' agents and credentials).
  ProcessResult rsh(const json& file, const std::string& host, const std::string& command) {
    const std::filesystem::path path = dir.path() / "launch.json";
    std::ofstream(path) << file.dump();
    return runShell("env POOLRUN_LAUNCH_FILE=" + path.string() + " " + POOLRUN_RSH_BINARY + " -x " + host +
                    " '" + command + "' </dev/null");
  }
};

}  // namespace poolrun::test
