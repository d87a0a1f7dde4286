// The agent's Sampler over topo::TelemetrySampler (NVML and sysfs).

#include <memory>

#include "poolrun/agent/agent.hpp"

namespace poolrun::agent {
namespace {

// A sampler opens NVML once: one made before the driver loaded (an agent started early at boot)
// would never see it. Without NVML, a new one is made this often.
constexpr std::chrono::seconds kNvmlRetry{60};

struct LiveSampler {
  topo::NodeTopology topology;
  std::string root;
  std::unique_ptr<topo::TelemetrySampler> sampler;
  std::chrono::steady_clock::time_point opened;

  void open() {
    sampler = std::make_unique<topo::TelemetrySampler>(topology, root);
    opened = std::chrono::steady_clock::now();
  }
};

}  // namespace

Sampler telemetrySampler(const topo::NodeTopology& topology, const std::filesystem::path& sysfs_root,
                         MigApplier* applier) {
  // The sampler reads ROOT/sys/class/infiniband; the agent's root stands in for /sys, as
  // `poolrun topo --sysfs-root` does: its parent is the sampler's root (the options check that the
  // folder is called sys).
  std::filesystem::path sys = sysfs_root.lexically_normal();
  if (sys.filename().empty()) sys = sys.parent_path();
  auto live = std::make_shared<LiveSampler>(LiveSampler{topology, sys.parent_path().string(), nullptr, {}});
  live->open();
  if (applier != nullptr)
    *applier = [live](size_t gpu, const std::vector<std::string>& profiles) {
      return live->sampler->applyMigLayout(gpu, profiles);
    };
  return [live] {
    if (!live->sampler->nvmlOk() && std::chrono::steady_clock::now() - live->opened >= kNvmlRetry)
      live->open();
    NodeSamples s;
    s.gpus = live->sampler->gpus();
    s.nics = live->sampler->nics();
    s.nvml_ok = live->sampler->nvmlOk();
    s.mig = live->sampler->mig();
    return s;
  };
}

}  // namespace poolrun::agent
