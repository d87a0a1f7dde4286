// What PoolState shows of itself: the pool's status, its nodes, leases and queue, and why a waiting
// request waits.

#include <algorithm>

#include "node_views.hpp"
#include "poolrun/pool/placement.hpp"
#include "poolrun/pool/state.hpp"
#include "request_text.hpp"

namespace poolrun::pool {

PoolStatus PoolState::status() const {
  PoolStatus s;
  std::vector<GpuUse> uses;
  for (const auto& [name, node] : nodes_) {
    (node.state == NodeState::kUp         ? s.nodes_up
     : node.state == NodeState::kDraining ? s.nodes_draining
                                          : s.nodes_down)++;
    if (node.live.unreachable) {
      ++s.nodes_unreachable;
      s.gpus_unreachable += static_cast<int>(node.gpuCount());
    }
    gpusOf(node, uses);
    for (const GpuUse& use : uses) {
      switch (use.state) {
        case GpuState::kFree:
          ++s.gpus_free;
          break;
        case GpuState::kLeased:
          ++s.gpus_leased;
          break;
        case GpuState::kFailed:
          ++s.gpus_failed;
          break;
        case GpuState::kForeign:
          ++s.gpus_foreign;
          break;
        case GpuState::kMig:
          ++s.gpus_mig;
          break;
      }
    }
    const Occupancy& held = occupancy_.at(name);
    s.gpus_shared += static_cast<int>(held.sharers.size());
    for (const auto& [gpu, ids] : held.sharers) s.mps_shares += static_cast<int>(ids.size());
    for (size_t u = node.gpuCount(); u < node.unitCount(); ++u) {
      if (holder(name, u))
        ++s.mig_leased;
      else if (node.placeable(u) && !node.topology->gpus[node.gpuOf(u)].mig.resetPending())
        ++s.mig_free;
      else
        ++s.mig_unusable;
    }
  }
  s.leases = static_cast<int>(leases_.size());
  s.queued = static_cast<int>(waitingInOrder().size());
  s.leases_granted = leases_granted_;
  return s;
}

std::vector<NodeInfo> PoolState::nodeInfos() const {
  std::vector<NodeInfo> out;
  for (const PoolNode* node : nodesInOrder()) {
    NodeInfo info;
    info.name = node->name;
    info.levels = node->levels;
    info.fabric = topo::toString(topo::nodeFabrics(*node->topology, node->fabric).front());
    info.labels = node->labels;
    info.state = node->state;
    info.drain_reason = node->drain_reason;
    info.unreachable = node->live.unreachable;
    info.agent = node->agent;
    if (node->live.last_heartbeat != TimePoint{}) info.last_heartbeat = node->live.last_heartbeat;
    for (size_t i = 0; i < node->gpuCount(); ++i) {
      const topo::Gpu& g = node->topology->gpus[i];
      GpuInfo gi;
      gi.index = i;
      gi.pci = g.pci.str();
      gi.uuid = g.uuid;
      gi.model = g.model;
      gi.memory_bytes = g.memory_bytes;
      gi.state = gpuState(node->name, i);
      if (const std::string* h = holder(node->name, i)) gi.lease = *h;
      if (auto sh = occupancy_.at(node->name).sharers.find(i); sh != occupancy_.at(node->name).sharers.end())
        for (const std::string& id : sh->second)
          for (const GpuRef& ref : leases_.at(id).gpus)
            if (ref.share && ref.node == node->name && ref.index == i)
              gi.shares.push_back({id, ref.share_percent, ref.share_memory});
      if (auto f = node->failures.find(i); f != node->failures.end()) {
        gi.failed_reason = f->second.reason;
        gi.failed_at = f->second.time;
      }
      if (i < node->live.gpus.size()) {
        const topo::GpuSample& sample = node->live.gpus[i];
        gi.utilization = sample.sm_utilization;
        gi.memory_used_bytes = sample.memory_used_bytes;
        gi.memory_total_bytes = sample.memory_total_bytes;
        gi.temperature_c = sample.temperature_c;
        gi.power_w = sample.power_w;
        gi.sample_error = sample.error;
        if (gi.uuid.empty()) gi.uuid = sample.uuid;
      }
      if (auto f = node->live.foreign.find(i); f != node->live.foreign.end())
        gi.foreign_processes = f->second;
      if (auto m = node->mig_layouts.find(i); m != node->mig_layouts.end()) gi.mig_layout = m->second;
      info.gpus.push_back(std::move(gi));
    }
    for (size_t u = node->gpuCount(); u < node->unitCount(); ++u) {
      const topo::MigInstance& m = *node->migInstance(u);
      MigInstanceInfo mi;
      mi.unit = u;
      mi.gpu_instance = m.gpu_instance;
      mi.compute_instance = m.compute_instance;
      mi.profile = m.profile;
      mi.uuid = m.uuid;
      mi.sm = m.sm;
      mi.memory_bytes = m.memory_bytes;
      const GpuState parent = gpuState(node->name, node->gpuOf(u));
      const std::string* h = holder(node->name, u);
      mi.state = h ? GpuState::kLeased : parent == GpuState::kMig ? GpuState::kFree : parent;
      if (h) mi.lease = *h;
      info.gpus[node->gpuOf(u)].mig_instances.push_back(std::move(mi));
    }
    out.push_back(std::move(info));
  }
  return out;
}

std::vector<Lease> PoolState::leaseList() const {
  std::vector<Lease> out;
  for (const auto& [id, lease] : leases_) out.push_back(withLiveView(lease, view_time_));
  std::sort(out.begin(), out.end(), [](const Lease& a, const Lease& b) {
    return a.created != b.created ? a.created < b.created : a.id < b.id;
  });
  return out;
}

std::vector<QueueInfo> PoolState::queueList() const {
  std::vector<QueueInfo> out;
  int position = 0;
  for (const QueueEntry* e : waitingInOrder()) {
    QueueInfo q;
    q.ticket = e->ticket;
    q.position = ++position;
    q.owner = e->request.owner;
    q.account = e->request.account;
    if (!accounts_.empty()) q.factors = factorsOf(e->request, e->enqueued);
    q.job_name = e->request.job_name;
    q.gpus = e->request.gpus;
    q.priority = e->request.priority;
    q.enqueued = e->enqueued;
    q.reason = waitReason(e->ticket);
    if (std::optional<TimePoint> planned = plannedStart(e->ticket); planned && *planned != kNever)
      q.planned_start = planned;
    out.push_back(std::move(q));
  }
  return out;
}

std::optional<TimePoint> PoolState::plannedStart(int64_t ticket) const {
  auto it = planned_.find(ticket);
  if (it == planned_.end()) return std::nullopt;
  return it->second;
}

std::string PoolState::waitReason(int64_t ticket) const {
  auto it = queue_.find(ticket);
  if (it == queue_.end() || it->second.status != QueueEntry::Status::kWaiting) return "";
  const LeaseRequest& r = it->second.request;
  // The GPUs it could have now, as the scheduler sees them: free, not failed, on up nodes that
  // match. Placed (in pool order) only where there are enough of them: a poll on a full pool of
  // 1,000 nodes stays a counting pass.
  std::vector<int64_t> ahead;
  for (const QueueEntry* e : waitingInOrder()) {
    if (e->ticket == ticket) break;
    ahead.push_back(e->ticket);
  }
  if (r.shared()) {
    // GPUs that could take the share now: free ones, and shared ones of the same owner with room.
    size_t room = 0;
    for (const NodeView& v : shareViews(
             r, [&](size_t s, size_t i) { return slots()[s].held->unheld(i); }, false, std::nullopt))
      room += v.usable.size();
    return "needs " + unitsText(r) + ", one per GPU; " + std::to_string(room) +
           (room == 1 ? " GPU has" : " GPUs have") + " room for it" +
           (ahead.empty() ? std::string() : "; behind ticket " + std::to_string(ahead.front()));
  }
  int free = 0;
  std::vector<std::string_view> draining;  // nodes that would match, but take no new lease
  for (const Slot& slot : slots()) {
    const PoolNode& node = *slot.node;
    if (node.state == NodeState::kDraining && nodeMatches(node, r, true))
      for (size_t i = 0; i < node.unitCount(); ++i)
        if (unitMatches(node, i, r)) {
          draining.push_back(node.name);
          break;
        }
    auto isFree = unheld(0, slot);
    int n = 0;
    for (size_t i = 0; i < node.unitCount(); ++i)
      if (isFree(i) && node.placeable(i) && unitMatches(node, i, r)) ++n;
    if (n > 0 && nodeMatches(node, r)) free += n;  // most nodes of a busy pool have none
  }
  const bool constrained = !r.gpu_model.empty() || r.min_memory_bytes > 0 || r.fabric || !r.labels.empty() ||
                           !r.exclude_nodes.empty();
  std::string text = "needs " + std::to_string(r.gpus) + (r.gpus == 1 ? " GPU" : " GPUs") + shapeText(r) +
                     ", " + std::to_string(free) + " free" + (constrained ? " that match" : "");
  // A request its quota's limit holds back is not about to start, whatever is free.
  const std::string limit = quotas_.empty() ? std::string() : overLimit(r, quotaBook());
  if (free >= r.gpus) {
    if (!placeFor(nodeViews(slots(), r, unheld<Slot>, false, &slot_cache_.unheld), r))
      text += ", not in that shape";
    else if (ahead.empty() && limit.empty())
      text += ", about to start";
    else if (!ahead.empty())
      text += std::string(", held for the requests ahead") +
              (r.max_duration ? " (it would not end before they start)"
                              : " (with a maximum duration it could start in a gap)");
  }
  if (!draining.empty()) {
    text += draining.size() == 1 ? " (node " : " (nodes ";
    for (size_t i = 0; i < draining.size() && i < 3; ++i)
      text += (i == 0 ? "" : ", ") + std::string(draining[i]);
    if (draining.size() > 3) text += " and " + std::to_string(draining.size() - 3) + " more";
    text += draining.size() == 1 ? " is draining: no new lease there)" : " are draining: no new lease there)";
  }
  if (!limit.empty()) text += "; over its quota: " + limit;
  // Victims of lower priority, and leases of equal or higher priority reclaimed because they were
  // borrowed beyond their quota's guarantee.
  size_t lower = 0, borrowed = 0;
  for (const auto& [id, lease] : leases_)
    if (lease.preempt_at && lease.preempted_for == ticket) ++(lease.priority < r.priority ? lower : borrowed);
  auto leases = [](size_t n) { return std::to_string(n) + (n == 1 ? " lease" : " leases"); };
  if (lower + borrowed > 0)
    text += "; preempting " + (lower > 0 ? leases(lower) + " of lower priority" : std::string()) +
            (lower > 0 && borrowed > 0 ? " and " : "") +
            (borrowed > 0 ? leases(borrowed) + " borrowed beyond " + (borrowed == 1 ? "its" : "their") +
                                " quota's guarantee"
                          : std::string()) +
            " (ending within the grace period)";
  if (!ahead.empty()) {
    text += ahead.size() == 1 ? "; behind ticket " : "; behind tickets ";
    const size_t shown = std::min<size_t>(ahead.size(), 3);
    for (size_t i = 0; i < shown; ++i)
      text += (i == 0 ? "" : i + 1 == shown && ahead.size() <= 3 ? " and " : ", ") + std::to_string(ahead[i]);
    if (ahead.size() > 3) text += " and " + std::to_string(ahead.size() - 3) + " more";
  }
  return text;
}

}  // namespace poolrun::pool
