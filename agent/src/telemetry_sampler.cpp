// The agent's Sampler over topo::TelemetrySampler (NVML and sysfs).

#include <memory>

#include "poolrun/agent/agent.hpp"

namespace poolrun::agent {

Sampler telemetrySampler(const topo::NodeTopology& topology, const std::filesystem::path& sysfs_root) {
  // The sampler reads ROOT/sys/class/infiniband; the agent's root stands in for /sys, as
  // `poolrun topo --sysfs-root` does: its parent is the sampler's root.
  std::filesystem::path root = sysfs_root.lexically_normal();
  if (root.filename().empty()) root = root.parent_path();
  auto sampler = std::make_shared<topo::TelemetrySampler>(topology, root.parent_path().string());
  return [sampler] {
    NodeSamples s;
    s.gpus = sampler->gpus();
    s.nics = sampler->nics();
    s.nvml_ok = sampler->nvmlOk();
    return s;
  };
}

}  // namespace poolrun::agent
