// What one heartbeat costs the agent, without NVML or a network: the size of the JSON document for
// an 8-GPU, 8-NIC node (two processes per GPU, each with an environment naming its lease) and the
// CPU time of one round of the loop (sample from a stub, read /proc, build the heartbeat, write it
// as JSON as the HTTP link does, read a reply back, list the leases' cgroups: 8 of them, in a folder
// laid out as a cgroup2 parent), and one run of the health checks the agent makes every 5 minutes
// while idle (the doctor's, over this machine's /sys and NVML where it has one). Prints; asserts
// nothing.
//   agent_bench [ROUNDS]

#include <time.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <string>

#include "agent_fakes.hpp"
#include "poolrun/agent/health.hpp"
#include "poolrun/agent/lease_cgroup.hpp"
#include "support/synthetic.hpp"
#include "support/temp_dir.hpp"

namespace {

using namespace poolrun;

double cpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// A link that does the CPU work of the HTTP one, no I/O: the heartbeat to JSON text, a reply from it.
class SerializingLink : public pool::AgentLink {
 public:
  void registerNode(const pool::NodeRegistration& r) override { last_ = pool::toJson(r).dump(); }
  pool::HeartbeatReply heartbeat(const pool::Heartbeat& h) override {
    last_ = pool::toJson(h).dump();
    pool::HeartbeatReply reply;
    reply.leases.emplace();
    for (size_t i = 0; i < h.gpus.size(); ++i) {
      reply.gpu_leases[i] = "L0123456789abcde" + std::to_string(i);
      reply.leases->insert(reply.gpu_leases[i]);
    }
    return pool::heartbeatReplyFromJson(nlohmann::json::parse(pool::toJson(reply).dump()));
  }
  std::string describe() const override { return "bench"; }
  size_t lastBytes() const { return last_.size(); }

 private:
  std::string last_;
};

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::stoi(argv[1]) : 20000;
  test::TempDir proc;
  test::StubNode node(test::synthetic({}));
  for (size_t g = 0; g < node.topology.gpus.size(); ++g) {
    for (uint32_t k = 0; k < 2; ++k) {
      uint32_t pid = static_cast<uint32_t>(1000 + 10 * g + k);
      node.processes[g].push_back({pid, uint64_t{20} << 30});
      std::string env = "PATH=/usr/bin:/bin";
      env += '\0';
      env += "POOLRUN_LEASE=L0123456789abcde" + std::to_string(g);
      env += '\0';
      env += std::string(3000, 'x');  // a typical environment's size
      env += '\0';
      proc.write(std::to_string(pid) + "/environ", env);
    }
  }
  agent::AgentConfig config;
  config.node.name = "bench01";
  config.node.topology = std::make_shared<const topo::NodeTopology>(node.topology);
  config.proc_root = proc.path();
  // The leases' cgroups, as a node running one job per GPU has them.
  test::TempDir cgroups;
  agent::CgroupMounts mounts;
  mounts.unified = cgroups.path();
  for (size_t g = 0; g < node.topology.gpus.size(); ++g)
    std::filesystem::create_directories(cgroups.path() / "poolrun" /
                                        ("L0123456789abcde" + std::to_string(g)));
  config.lease_cgroups.list = [&] {
    return agent::leaseCgroupNames(mounts, agent::CgroupVersion::kV2, "poolrun");
  };
  config.lease_cgroups.end = [](const std::string&) -> size_t { return 0; };
  // One run of `rounds` rounds: the agent's CPU per round.
  size_t bytes = 0;
  auto perRound = [&](const agent::AgentConfig& c) {
    auto* link = new SerializingLink;
    bool first = true;
    agent::LinkFactory open = [&]() -> std::unique_ptr<pool::AgentLink> {
      if (!first) return std::make_unique<SerializingLink>();
      first = false;
      return std::unique_ptr<pool::AgentLink>(link);
    };
    test::FakeTime time;
    time.rounds = rounds;
    std::ostringstream log;
    agent::Agent a(c, open, node.sampler(), time.clock(), log);
    const double start = cpuSeconds();
    a.run();
    bytes = link->lastBytes();
    return (cpuSeconds() - start) / rounds * 1e6;
  };
  agent::AgentConfig bare = config;
  bare.lease_cgroups = {};
  const double without = perRound(bare), with = perRound(config);
  std::printf("heartbeat JSON, 8 GPUs (2 processes each), 8 NIC ports: %zu bytes\n", bytes);
  std::printf(
      "agent CPU time per round (stub sampler, /proc reads, JSON out and reply in): %.1f us; with the "
      "leases' cgroups listed: %.1f us (%d rounds each)\n",
      without, with, rounds);
  // The health checks, once (they run every --health-interval while the node is idle).
  const auto check = agent::doctorHealthCheck("/sys", "poolrun-cuda-probe");
  const auto wall = std::chrono::steady_clock::now();
  const double before = cpuSeconds();
  const std::string said = check();
  std::printf("one run of the health checks: %.2f ms of CPU, %.2f ms in all (%s)\n",
              (cpuSeconds() - before) * 1e3,
              std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - wall).count(),
              said.empty() ? "they pass" : said.c_str());
  return 0;
}
