#include "poolrun/pool/live_metrics.hpp"

#include "poolrun/pool/server_metrics.hpp"

#include <optional>

namespace poolrun::pool {
namespace {

void family(std::ostream& out, const char* name, const char* help, const char* type) {
  out << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n";
}

// node="n01",gpu="3",uuid="GPU-...",lease="L...",owner="alice" (lease and owner while leased).
std::string gpuLabels(const PoolState& state, const PoolNode& node, size_t index) {
  std::string uuid = node.topology->gpus[index].uuid;
  if (index < node.live.gpus.size() && !node.live.gpus[index].uuid.empty()) uuid = node.live.gpus[index].uuid;
  std::string labels = "node=\"" + labelValue(node.name) + "\",gpu=\"" + std::to_string(index) +
                       "\",uuid=\"" + labelValue(uuid) + "\"";
  if (const std::string* holder = state.holder(node.name, index)) {
    auto lease = state.leaseMap().find(*holder);
    labels += ",lease=\"" + labelValue(*holder) + "\",owner=\"" +
              labelValue(lease == state.leaseMap().end() ? "" : lease->second.owner) + "\"";
  }
  return labels;
}

template <typename T>
void gpuGauge(std::ostream& out, const PoolState& state, const char* name, const char* help,
              std::optional<T> (*value)(const topo::GpuSample&)) {
  family(out, name, help, "gauge");
  for (const PoolNode* node : state.nodesInOrder())
    for (size_t i = 0; i < node->live.gpus.size() && i < node->gpuCount(); ++i)
      if (std::optional<T> v = value(node->live.gpus[i]))
        out << name << "{" << gpuLabels(state, *node, i) << "} " << *v << "\n";
}

}  // namespace

void writeLiveMetrics(std::ostream& out, const PoolState& state, TimePoint now) {
  gpuGauge<double>(out, state, "poolrun_gpu_utilization_ratio",
                   "Share of time a kernel ran on the GPU (NVML), from its agent's last heartbeat.",
                   [](const topo::GpuSample& g) { return g.sm_utilization; });
  gpuGauge<uint64_t>(out, state, "poolrun_gpu_memory_used_bytes", "GPU memory in use.",
                     [](const topo::GpuSample& g) { return g.memory_used_bytes; });
  gpuGauge<uint64_t>(out, state, "poolrun_gpu_memory_total_bytes", "GPU memory in all.",
                     [](const topo::GpuSample& g) { return g.memory_total_bytes; });
  gpuGauge<double>(out, state, "poolrun_gpu_temperature_celsius", "GPU temperature.",
                   [](const topo::GpuSample& g) { return g.temperature_c; });
  gpuGauge<double>(out, state, "poolrun_gpu_power_watts", "GPU power draw.",
                   [](const topo::GpuSample& g) { return g.power_w; });
  gpuGauge<uint64_t>(out, state, "poolrun_gpu_ecc_uncorrected_errors",
                     "Uncorrectable ECC errors since the GPU's driver loaded (volatile count).",
                     [](const topo::GpuSample& g) { return g.ecc_uncorrected_volatile; });

  family(out, "poolrun_gpu_xid_errors_total", "XID errors the agents reported since poold started.",
         "counter");
  for (const PoolNode* node : state.nodesInOrder())
    for (const auto& [key, count] : node->live.xid_counts)
      out << "poolrun_gpu_xid_errors_total{node=\"" << labelValue(node->name) << "\",gpu=\"" << key.first
          << "\",xid=\"" << key.second << "\"} " << count << "\n";

  family(out, "poolrun_node_heartbeat_age_seconds",
         "Time since the node's agent was last heard from (nodes with an agent).", "gauge");
  for (const PoolNode* node : state.nodesInOrder())
    if (!node->agent.empty() && node->live.last_heartbeat != TimePoint{})
      out << "poolrun_node_heartbeat_age_seconds{node=\"" << labelValue(node->name) << "\"} "
          << std::chrono::duration<double>(now - node->live.last_heartbeat).count() << "\n";

  family(out, "poolrun_lease_idle_seconds",
         "How long an idle lease's GPUs have been unused (leases poold finds idle).", "gauge");
  for (const Lease& lease : state.leaseList()) {
    if (!state.idle(lease, now)) continue;
    out << "poolrun_lease_idle_seconds{lease=\"" << labelValue(lease.id) << "\",owner=\""
        << labelValue(lease.owner) << "\"} "
        << std::chrono::duration<double>(now - state.lastBusy(lease.id).value_or(now)).count() << "\n";
  }
  family(out, "poolrun_leases_reclaimed_total", "Idle leases poold ended (--reclaim-idle) since it started.",
         "counter");
  out << "poolrun_leases_reclaimed_total " << state.leasesReclaimed() << "\n";
  const std::vector<QuotaUse> quotas = state.quotaUse();
  if (!quotas.empty()) {
    auto quotaFamily = [&](const char* name, const char* help, auto value) {
      family(out, name, help, "gauge");
      for (const QuotaUse& q : quotas) {
        std::optional<int> v = value(q);
        if (!v) continue;
        out << name << "{quota=\"" << labelValue(q.quota.name) << "\",kind=\"" << toString(q.quota.kind)
            << "\"} " << *v << "\n";
      }
    };
    quotaFamily("poolrun_quota_used_gpus", "GPUs the owners of a quota hold.",
                [](const QuotaUse& q) -> std::optional<int> { return q.used; });
    quotaFamily("poolrun_quota_borrowed_gpus", "GPUs a quota's owners hold beyond its guarantee.",
                [](const QuotaUse& q) -> std::optional<int> { return q.borrowed; });
    quotaFamily("poolrun_quota_guaranteed_gpus", "GPUs a quota guarantees.",
                [](const QuotaUse& q) -> std::optional<int> { return q.quota.guaranteed; });
    quotaFamily("poolrun_quota_limit_gpus", "The most GPUs a quota's owners may hold (quotas with a limit).",
                [](const QuotaUse& q) { return q.quota.limit; });
  }
  if (!state.accounts().empty()) {
    // Per account, as the last scheduling pass computed them (a copy: no computation on a scrape).
    const FairShareReport report = state.fairShareReport(now);
    family(out, "poolrun_fairshare_factor",
           "Each account's fair-share factor, 0 to 1 (docs/fairshare.md), as the last scheduling pass "
           "computed it.",
           "gauge");
    for (const FairShareRow& r : report.rows)
      if (r.user.empty())
        out << "poolrun_fairshare_factor{account=\"" << labelValue(r.account) << "\"} " << r.factor << "\n";
    family(out, "poolrun_fairshare_usage_gpu_seconds",
           "Each account's allocated GPU-seconds, its sub-accounts' included, halved every "
           "--fairshare-half-life.",
           "gauge");
    for (const FairShareRow& r : report.rows)
      if (r.user.empty())
        out << "poolrun_fairshare_usage_gpu_seconds{account=\"" << labelValue(r.account) << "\"} "
            << r.raw_usage << "\n";
  }
  family(out, "poolrun_leases_preempted_total",
         "Leases chosen as preemption victims (given notice) since poold started.", "counter");
  out << "poolrun_leases_preempted_total " << state.leasesPreempted() << "\n";
}

}  // namespace poolrun::pool
