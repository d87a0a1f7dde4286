// A large simulated pool for the dashboard's benchmark (tests/pool/dashboard/bench.py): registers
// NODES nodes with a poold as their agents would (POST /v1/nodes/NAME/register, with an
// administrator's token), PER_SWITCH under each leaf switch, every node the topology of FILE, then
// sends each node one heartbeat with readings: utilisation, memory, temperature and power that vary
// by node and GPU, the first BUSY share of the nodes busy, the rest idle. Prints what it did.
//
//   dashboard_fleet --pool URL --token TOKEN --topology FILE [--nodes 12500] [--per-switch 32]
//                   [--busy 0.9] [--threads 4]

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "poolrun/pool/agent_link.hpp"
#include "poolrun/pool/agent_protocol.hpp"
#include "poolrun/topo/sources.hpp"

namespace {

using namespace poolrun;

struct Options {
  std::string pool, token, topology;
  int nodes = 12500;
  int per_switch = 32;
  double busy = 0.9;
  int threads = 4;
};

std::string nodeName(int n) {
  char name[16];
  std::snprintf(name, sizeof name, "g%05d", n + 1);
  return name;
}

std::string switchName(int n, int perSwitch) {
  char name[16];
  std::snprintf(name, sizeof name, "leaf%03d", n / perSwitch + 1);
  return name;
}

pool::Heartbeat heartbeatOf(const std::string& node, int n, const topo::NodeTopology& topology,
                            const std::string& hash, bool busy) {
  pool::Heartbeat hb;
  hb.node = node;
  hb.agent_version = "poold-agent bench";
  hb.topology_hash = hash;
  hb.time = std::chrono::system_clock::now();
  for (size_t i = 0; i < topology.gpus.size(); ++i) {
    const int seed = n * 7 + static_cast<int>(i) * 13;
    topo::GpuSample g;
    g.index = i;
    g.pci = topology.gpus[i].pci.str();
    g.sm_utilization = busy ? 0.3 + 0.01 * (seed % 70) : 0.01 * (seed % 4);
    g.memory_total_bytes = uint64_t{80} << 30;
    g.memory_used_bytes = busy ? (uint64_t{20} + static_cast<uint64_t>(seed % 60)) << 30 : uint64_t{1} << 29;
    g.temperature_c = (busy ? 55 : 35) + seed % 25;
    g.power_w = busy ? 400.0 + seed % 300 : 70.0;
    g.ecc_uncorrected_volatile = 0;
    hb.gpus.push_back(std::move(g));
  }
  return hb;
}

int run(const Options& o) {
  auto topology = std::make_shared<const topo::NodeTopology>(topo::readTopologyFile(o.topology));
  const std::string hash = pool::topologyHash(*topology);
  auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  std::vector<std::string> errors(static_cast<size_t>(o.threads));
  for (int t = 0; t < o.threads; ++t)
    threads.emplace_back([&, t] {
      try {
        auto link = pool::openAgentLink(o.pool, o.token);
        for (int n = t; n < o.nodes; n += o.threads) {
          pool::NodeRegistration r;
          r.node.name = nodeName(n);
          r.node.topology = topology;
          r.node.levels.switch_name = switchName(n, o.per_switch);
          r.agent_version = "poold-agent bench";
          link->registerNode(r);
          link->heartbeat(heartbeatOf(r.node.name, n, *topology, hash, n < o.busy * o.nodes));
        }
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(t)] = e.what();
      }
    });
  for (auto& th : threads) th.join();
  for (const std::string& e : errors)
    if (!e.empty()) {
      std::fprintf(stderr, "dashboard_fleet: %s\n", e.c_str());
      return 1;
    }
  std::printf(
      "dashboard_fleet: registered %d nodes (%zu GPUs each) under %d switches and sent a heartbeat each in "
      "%.1f s\n",
      o.nodes, topology->gpus.size(), (o.nodes + o.per_switch - 1) / o.per_switch,
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i], v = argv[i + 1];
    if (a == "--pool")
      o.pool = v;
    else if (a == "--token")
      o.token = v;
    else if (a == "--topology")
      o.topology = v;
    else if (a == "--nodes")
      o.nodes = std::atoi(v.c_str());
    else if (a == "--per-switch")
      o.per_switch = std::atoi(v.c_str());
    else if (a == "--busy")
      o.busy = std::atof(v.c_str());
    else if (a == "--threads")
      o.threads = std::atoi(v.c_str());
    else {
      std::fprintf(stderr, "dashboard_fleet: unknown option %s\n", a.c_str());
      return 2;
    }
  }
  if (o.pool.empty() || o.token.empty() || o.topology.empty() || o.nodes < 1 || o.per_switch < 1 ||
      o.threads < 1) {
    std::fprintf(stderr,
                 "usage: dashboard_fleet --pool URL --token TOKEN --topology FILE [--nodes N] [--per-switch "
                 "N] [--busy SHARE] [--threads N]\n");
    return 2;
  }
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dashboard_fleet: %s\n", e.what());
    return 1;
  }
}
