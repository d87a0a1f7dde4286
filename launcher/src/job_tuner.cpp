// The tuner configuration of a launch (job_tuner.hpp).

#include "job_tuner.hpp"

#include <set>
#include <string>

namespace poolrun::launcher {

nlohmann::ordered_json tunerConfig(const JobPlan& plan) {
  const RankPlan& r0 = plan.ranks.front();
  const topo::NodeTopology& t = *plan.nodeOf(r0).node.topology;
  const topo::Gpu& gpu = t.gpus[r0.gpu];
  // MIG instances reach each other through host memory, never NVLink (planner.cpp: rankEnv): the
  // tuner models the node without it.
  const bool mig = !r0.mig.empty();
  int links = mig ? 0 : gpu.nvswitch_links;
  for (const topo::NvLinkPeer& p : gpu.nvlinks) links += p.gpu != topo::kNoIndex && !mig ? p.count : 0;
  double perLink = gpu.sm >= 100 ? 50 : gpu.sm == 60 ? 20 : 25;  // GB/s per link and direction
  std::set<std::string> nics;
  bool gdr = true;
  for (const RankPlan& r : plan.ranks) {
    if (r.node_index != 0) break;
    for (const NicChoice& n : r.nics) nics.insert(n.name);
    gdr = gdr && r.gdr;
  }
  std::string vendor = t.packages.empty() ? "" : t.packages.front().vendor;
  return {{"schema", "poolrun.tuner/1"},
          {"fabric", toString(plan.fabric)},
          {"nodes", plan.nodes.size()},
          {"gpus_per_node", plan.nodes.front().ranks},
          {"gpu",
           {{"sm", gpu.sm},
            {"nvlink_gbyte_s", links * perLink},
            {"nvswitch", t.nvswitch && !mig},
            {"nvls", t.nvswitch && gpu.sm >= 90 && !mig}}},
          {"net",
           {{"nics_per_node", nics.size()},
            {"nic_gbit_s", r0.nics.empty() ? 0.0 : r0.nics.front().rate_gbps},
            {"gdr", gdr && !nics.empty()},
            {"sharp", false}}},
          {"cpu_vendor", vendor == "AuthenticAMD"   ? "amd"
                         : vendor == "GenuineIntel" ? "intel"
                                                    : "other"}};
}

}  // namespace poolrun::launcher
