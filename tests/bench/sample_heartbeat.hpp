// A node's heartbeat as the benchmarks send it (heartbeat_bench over HTTP, pool_bench in process).
#pragma once

#include <chrono>
#include <string>

#include "poolrun/pool/agent_protocol.hpp"
#include "poolrun/topo/topology.hpp"

namespace poolrun::pool::bench {

// A node's heartbeat as poold-agent sends it: 8 GPUs with utilisation, memory, temperature, power,
// ECC and one compute process each (named with its lease where the node is held), 8 NIC ports.
inline Heartbeat heartbeatOf(const std::string& node, const topo::NodeTopology& topology,
                             const std::string& hash, const std::string& lease, int seed) {
  Heartbeat hb;
  hb.node = node;
  hb.agent_version = "poold-agent bench";
  hb.topology_hash = hash;
  hb.time = std::chrono::system_clock::now();
  for (size_t i = 0; i < topology.gpus.size(); ++i) {
    topo::GpuSample g;
    g.index = i;
    g.uuid = "GPU-" + node + "-" + std::to_string(i) + "-0000-0000-000000000000";
    g.pci = topology.gpus[i].pci.str();
    g.sm_utilization = lease.empty() ? 0.0 : 0.5 + 0.01 * static_cast<double>((seed + i) % 50);
    g.memory_utilization = lease.empty() ? 0.0 : 0.3;
    g.memory_total_bytes = uint64_t{80} << 30;
    g.memory_used_bytes = lease.empty() ? uint64_t{512} << 20 : uint64_t{61} << 30;
    g.temperature_c = 40 + static_cast<double>((seed + i) % 30);
    g.power_w = lease.empty() ? 70.0 : 550.0 + static_cast<double>((seed + i) % 100);
    g.ecc_uncorrected_volatile = 0;
    if (!lease.empty()) {
      uint32_t pid = 100000 + static_cast<uint32_t>(i);
      g.processes.push_back({pid, uint64_t{60} << 30});
      hb.process_leases[pid] = lease;
    }
    hb.gpus.push_back(std::move(g));
  }
  for (const topo::Nic& n : topology.nics)
    for (const topo::NicPort& p : n.ports) {
      topo::NicPortSample s;
      s.nic = n.name;
      s.port = p.port;
      s.state = topo::PortState::kActive;
      s.rate_gbps = 400;
      hb.nics.push_back(s);
    }
  return hb;
}

}  // namespace poolrun::pool::bench
