// Elastic leases (LeaseRequest::max_gpus): grown towards their maximum while GPUs are free and
// nobody of equal or higher priority waits, shrunk back towards their minimum for a request of
// higher priority (PoolState::preemptFor chooses what a shrink gives back; this file applies it).

#include <algorithm>
#include <set>

#include "poolrun/pool/placement.hpp"
#include "poolrun/pool/state.hpp"

namespace poolrun::pool {

void PoolState::poolOrder(std::vector<GpuRef>& gpus) const {
  slots();  // the cache of pool order, up to date
  const auto& index = slot_cache_.index;
  auto rank = [&](const GpuRef& g) {
    auto it = index.find(g.node);
    return std::pair(it == index.end() ? SIZE_MAX : it->second, g.index);
  };
  std::sort(gpus.begin(), gpus.end(), [&](const GpuRef& a, const GpuRef& b) { return rank(a) < rank(b); });
}

std::vector<GpuRef> PoolState::growthFor(const Lease& lease, int most) const {
  const LeaseRequest& r = *lease.elastic;
  const int step = std::max(1, r.gpus_per_node);
  most = most / step * step;
  if (most <= 0) return {};
  std::set<std::string_view> mine;
  for (const GpuRef& g : lease.gpus) mine.insert(g.node);
  // Under one leaf switch: the lease's own; a node of no known switch is a group of its own, so a
  // lease there grows on its own nodes only.
  std::string leaf;
  if (r.one_switch)
    if (auto n = nodes_.find(lease.gpus.front().node); n != nodes_.end()) leaf = n->second.levels.switch_name;
  // The free GPUs that match the request, on nodes its shape allows.
  std::vector<NodeView> here, elsewhere;
  for (size_t s = 0; s < slots().size(); ++s) {
    if (slot_cache_.unheld[s] == 0) continue;
    const PoolNode& node = *slots()[s].node;
    if (!nodeMatches(node, r)) continue;
    if (r.one_switch && (leaf.empty() ? !mine.count(node.name) : node.levels.switch_name != leaf)) continue;
    const Occupancy& held = *slots()[s].held;
    NodeView v{&node, {}, false};
    for (size_t i = 0; i < node.gpuCount(); ++i)
      if (held.unheld(i) && node.placeable(i) && gpuMatches(node.topology->gpus[i], r)) v.usable.push_back(i);
    if (v.usable.empty()) continue;
    v.whole = v.usable.size() == node.gpuCount();
    (mine.count(node.name) ? here : elsewhere).push_back(std::move(v));
  }
  dropReserved(here, r, view_time_);  // an elastic lease has no end: it grows off reserved nodes
  dropReserved(elsewhere, r, view_time_);
  std::vector<GpuRef> out;
  // As many per node: only new nodes, each with that many.
  if (r.gpus_per_node > 0) {
    int nodes = 0;
    for (const NodeView& v : elsewhere) nodes += static_cast<int>(v.usable.size()) >= step ? 1 : 0;
    LeaseRequest more = r;
    more.gpus = std::min(most, nodes * step);
    more.one_switch = false;  // the nodes above are under the lease's switch already
    if (more.gpus == 0) return {};
    return place(elsewhere, more).value_or(std::vector<GpuRef>{});
  }
  // Any split: the lease's own nodes first (ranks that share a node talk fastest), then placement's
  // choice among the others.
  for (const NodeView& v : here)
    for (size_t i : v.usable)
      if (static_cast<int>(out.size()) < most) out.push_back({v.node->name, i});
  int left = most - static_cast<int>(out.size()), free = 0;
  for (const NodeView& v : elsewhere) free += static_cast<int>(v.usable.size());
  if (left > 0 && free > 0) {
    LeaseRequest more = r;
    more.gpus = std::min(left, free);
    more.one_switch = false;
    if (std::optional<std::vector<GpuRef>> gpus = place(elsewhere, more))
      out.insert(out.end(), gpus->begin(), gpus->end());
  }
  return out;
}

bool PoolState::growNow(Lease& lease, QuotaBook& book, TimePoint now, bool resize) {
  const LeaseRequest& r = *lease.elastic;
  int most = r.max_gpus - static_cast<int>(lease.gpus.size());
  const Quota* q = quotas_.of(lease.owner);
  if (q != nullptr && q->limit) most = std::min(most, *q->limit - book.used[q]);
  std::vector<GpuRef> extra = growthFor(lease, most);
  if (extra.empty()) return false;
  const size_t before = lease.gpus.size();
  for (const GpuRef& g : extra) {
    occupancy(g.node).holder.at(g.index) = lease.id;
    heldChanged(g.node, true);
  }
  lease.gpus.insert(lease.gpus.end(), extra.begin(), extra.end());
  poolOrder(lease.gpus);
  if (q != nullptr) book.used[q] += static_cast<int>(extra.size());
  accountLease(lease, now);
  dirty_.leases.insert(lease.id);
  if (!dirty_.new_leases.count(lease.id)) dirty_.resized.insert(lease.id);
  if (!resize) {
    // Part of the grant: the lease as granted is the larger one.
    if (!lease_events_.empty() && lease_events_.back().kind == LeaseEvent::Kind::kGranted &&
        lease_events_.back().lease.id == lease.id)
      lease_events_.back().lease = lease;
    return true;
  }
  const TimePoint since = lease.resized;
  ++lease.resizes;
  lease.resized = now;
  ++leases_resized_;
  lease_events_.push_back({LeaseEvent::Kind::kGrown, lease,
                           "grown from " + std::to_string(before) + " to " +
                               std::to_string(lease.gpus.size()) +
                               " GPUs (free GPUs, and no request of equal or higher priority waiting)",
                           before, since});
  return true;
}

void PoolState::growElastic(TimePoint now, std::optional<int> waiting, QuotaBook& book) {
  // Only when GPUs are free; the highest priority first, then the oldest.
  if (elastic_leases_.empty()) return;
  slots();
  bool anyFree = false;
  for (uint32_t n : slot_cache_.unheld) anyFree = anyFree || n > 0;
  if (!anyFree) return;
  std::vector<Lease*> growable;
  for (const std::string& id : elastic_leases_)  // not every lease: this runs at every grant and release
    if (Lease& lease = leases_.at(id); static_cast<int>(lease.gpus.size()) < lease.elastic->max_gpus &&
                                       !lease.preempt_at && !lease.shrink_at &&
                                       now - lease.resized >= lease.elastic->resize_interval &&
                                       now < lease.expires && !(waiting && *waiting >= lease.priority))
      growable.push_back(&lease);
  std::sort(growable.begin(), growable.end(), [](const Lease* a, const Lease* b) {
    if (a->priority != b->priority) return a->priority > b->priority;
    if (a->created != b->created) return a->created < b->created;
    return a->id < b->id;
  });
  for (Lease* lease : growable) growNow(*lease, book, now, true);
}

void PoolState::applyShrink(Lease& lease, TimePoint now, const std::string& why) {
  const size_t before = lease.gpus.size();
  const std::set<GpuRef> gone(lease.shrink_gpus.begin(), lease.shrink_gpus.end());
  for (const GpuRef& g : gone) {
    auto o = occupancy_.find(g.node);
    if (o != occupancy_.end() && g.index < o->second.holder.size() && o->second.holder[g.index] == lease.id) {
      o->second.holder[g.index].clear();
      heldChanged(g.node, false);
    }
  }
  std::erase_if(lease.gpus, [&](const GpuRef& g) { return gone.count(g) > 0; });
  lease.shrink_gpus.clear();
  lease.shrink_at.reset();
  lease.shrink_reason.clear();
  lease.shrunk_for = 0;
  accountLease(lease, now);
  const TimePoint since = lease.resized;
  ++lease.resizes;
  lease.resized = now;
  ++leases_resized_;
  replan_ = true;
  dirty_.leases.insert(lease.id);
  if (!dirty_.new_leases.count(lease.id)) dirty_.resized.insert(lease.id);
  lease_events_.push_back({LeaseEvent::Kind::kShrunk, lease, why, before, since});
}

}  // namespace poolrun::pool
