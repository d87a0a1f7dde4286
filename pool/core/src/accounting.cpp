// PoolState's side of the usage ledger (usage.hpp): what a lease holds of each node, what each
// sample of a GPU says the leases holding it did, and the accounting interval's checkpoint.

#include <algorithm>

#include "poolrun/pool/state.hpp"

namespace poolrun::pool {

namespace {

// What one GPU may draw, at most, for the ledger: an H100 SXM is 700 W, a B200 1,000 W, a GB300
// 1,400 W. A figure past it is not a GPU's.
constexpr double kMaxGpuWatts = 10'000;

// The part of a GPU a unit is: a MIG instance its slices of the GPU's (the largest profile's), an
// MPS share its percentage of the SMs (a share without a limit may use them all: a whole GPU).
double unitShare(const PoolNode& node, const GpuRef& g) {
  if (g.share) return g.share_percent > 0 ? g.share_percent / 100.0 : 1.0;
  const topo::MigInstance* instance = node.migInstance(g.index);
  if (instance == nullptr) return 1.0;
  int slices = 0;
  for (const topo::MigProfile& p : node.topology->gpus[node.gpuOf(g.index)].mig.profiles)
    slices = std::max(slices, p.slices);
  if (slices <= 0) slices = 7;
  return std::clamp(static_cast<double>(instance->slices) / slices, 0.0, 1.0);
}

std::string modelOf(const PoolNode& node, size_t unit) {
  return unit < node.unitCount() ? node.topology->gpus[node.gpuOf(unit)].model : std::string();
}

}  // namespace

void PoolState::accountLease(const Lease& lease, TimePoint now) {
  std::vector<UsageLedger::Holding> holdings;
  for (const GpuRef& g : lease.gpus) {
    auto node = nodes_.find(g.node);
    if (node == nodes_.end()) continue;
    if (holdings.empty() || holdings.back().node != g.node)
      holdings.push_back({g.node, modelOf(node->second, g.index), 0});
    holdings.back().gpus += unitShare(node->second, g);
  }
  // The account charged; without an accounts file, the owner's quota group.
  const Quota* quota = quotas_.of(lease.owner);
  const std::string& account =
      !lease.account.empty()
          ? lease.account
          : (quota != nullptr && quota->kind == Quota::Kind::kGroup ? quota->name : std::string());
  usage_.holds(lease, account, holdings, now, dirty_);
}

// What GPU `sample.index` did since `before` (its previous sample), for the leases holding it or
// its MIG instances or MPS shares. The span is poold's time between the node's two heartbeats (an
// agent's clock, or its lies, do not stretch it); a gap longer than the node timeout counts only
// that long (the node was unreachable for the rest); the energy counter's growth is exact over any
// gap, and where the GPU has none, its power is taken as constant since the sample before.
void PoolState::accountSample(const PoolNode& node, const Occupancy& held, const topo::GpuSample& before,
                              const topo::GpuSample& sample, TimePoint now) {
  const TimePoint previous = node.live.previous_heartbeat;
  if (before.time == topo::SampleTime{} || sample.time <= before.time || previous == TimePoint{} ||
      now <= previous)
    return;
  GpuSpan span;
  span.seconds =
      std::chrono::duration<double>(std::min<TimePoint::duration>(now - previous, live_.node_timeout))
          .count();
  span.utilization = sample.sm_utilization;
  span.idle_below = live_.idle_utilization;
  // The counter's growth, where it grew by what a GPU can draw at most (kMaxGpuWatts over the whole
  // gap): a counter reset by a driver reload, or an agent's absurd figure, falls back to power.
  const double gap = std::chrono::duration<double>(now - previous).count();
  if (sample.energy_mj && before.energy_mj && *sample.energy_mj >= *before.energy_mj &&
      static_cast<double>(*sample.energy_mj - *before.energy_mj) / 1000.0 <= kMaxGpuWatts * gap)
    span.energy_j = static_cast<double>(*sample.energy_mj - *before.energy_mj) / 1000.0;
  else if (sample.power_w && *sample.power_w <= kMaxGpuWatts)
    span.energy_j = *sample.power_w * span.seconds;
  const size_t gpu = sample.index;
  if (gpu < held.holder.size() && !held.holder[gpu].empty())
    usage_.sample(held.holder[gpu], node.name, 1.0, span, now);
  for (size_t u = node.gpuCount(); u < node.unitCount() && u < held.holder.size(); ++u)
    if (node.gpuOf(u) == gpu && !held.holder[u].empty())
      usage_.sample(held.holder[u], node.name, unitShare(node, GpuRef{.node = node.name, .index = u}), span,
                    now);
  auto sharers = held.sharers.find(gpu);
  if (sharers == held.sharers.end()) return;
  // Each share's part of what the GPU did: its SM percentage, in proportion where the shares add up
  // to more than the GPU (shares without a limit), so that the GPU's energy is counted once.
  std::vector<std::pair<const std::string*, double>> parts;
  double sum = 0;
  for (const std::string& id : sharers->second) {
    auto lease = leases_.find(id);
    if (lease == leases_.end()) continue;
    for (const GpuRef& g : lease->second.gpus)
      if (g.share && g.node == node.name && g.index == gpu) {
        parts.emplace_back(&id, unitShare(node, g));
        sum += parts.back().second;
      }
  }
  for (const auto& [id, part] : parts) usage_.sample(*id, node.name, sum > 1 ? part / sum : part, span, now);
}

void PoolState::accountUsage(TimePoint now) {
  if (usage_unchecked_) {
    std::set<std::string, std::less<>> ids;
    for (const auto& [id, lease] : leases_) ids.insert(id);
    usage_.closeLost(ids, dirty_);
    // Leases the ledger does not count (granted before the ledger was: a state file of schema 4)
    // are counted from now.
    for (const auto& [id, lease] : leases_)
      if (!usage_.counts(id)) accountLease(lease, now);
    usage_unchecked_ = false;
  }
  usage_.checkpoint(now, usage_options_, dirty_);
}

}  // namespace poolrun::pool
