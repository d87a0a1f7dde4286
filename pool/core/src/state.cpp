#include "poolrun/pool/state.hpp"

#include <algorithm>
#include <random>
#include <tuple>

#include "poolrun/pool/limits.hpp"
#include "poolrun/pool/placement.hpp"
#include "poolrun/topo/names.hpp"
#include "poolrun/topo/regular_file.hpp"

namespace poolrun::pool {
namespace {

using std::chrono::seconds;

PoolError gone(const std::string& id) {
  return PoolError(PoolFailure::kGone, ErrorCode::kNotFound,
                   "lease " + id + " is gone (expired, released or never granted); acquire a new one");
}

// "8 GPUs", "7 MIG instances 1g.10gb", "2 MIG instances 3g.40gb or larger", "4 MPS shares of 25%
// and 10 GiB": what a request asks for.
std::string unitsText(const LeaseRequest& r) {
  if (r.shared())
    return std::to_string(r.gpus) + " MPS share" + (r.gpus == 1 ? "" : "s") + " of " +
           (r.share_percent > 0 ? std::to_string(r.share_percent) + "% of a GPU" : "a GPU") +
           (r.share_memory_bytes > 0 ? " and " + topo::byteSizeText(r.share_memory_bytes) : "");
  if (!r.mig()) return std::to_string(r.gpus) + " GPUs";
  return std::to_string(r.gpus) + " MIG instance" + (r.gpus == 1 ? " " : "s ") + r.mig_profile +
         (r.mig_or_larger ? " or larger" : "");
}

// " as whole nodes", " as 8 per node", " under one leaf switch" or "": the shape a request asks for.
std::string shapeText(const LeaseRequest& r) {
  return r.whole_nodes         ? " as whole nodes"
         : r.gpus_per_node > 0 ? " as " + std::to_string(r.gpus_per_node) + " per node"
         : r.one_switch        ? " under one leaf switch"
                               : "";
}

// t + d, or kNever where that is past what a TimePoint holds (t before the epoch included).
TimePoint addSaturating(TimePoint t, seconds d) {
  constexpr seconds kLongest = std::chrono::duration_cast<seconds>(TimePoint::duration::max());
  if (t == kNever || d >= kLongest) return kNever;
  if (d > seconds(0) && t > kNever - std::chrono::duration_cast<TimePoint::duration>(d)) return kNever;
  return t + d;
}

// The latest a lease may hold its GPUs: its maximum end, and for a preempted one its deadline and
// the margin for the kill.
TimePoint leaseEnd(const Lease& lease, const PreemptOptions& preempt) {
  TimePoint end = lease.max_end.value_or(kNever);
  if (lease.preempt_at) end = std::min(end, addSaturating(*lease.preempt_at, preempt.kill_margin));
  return end;
}

// The latest an elastic lease under a shrink notice holds the GPUs it gives back.
TimePoint shrinkEnd(const Lease& lease, const PreemptOptions& preempt) {
  return lease.shrink_at ? addSaturating(*lease.shrink_at, preempt.kill_margin) : kNever;
}

// The nodes of `slots` (PoolState's, in pool order) that match `r` and have a GPU to give, as
// placement sees them: each with its GPUs that are free (`freeOn(slot index, slot)(gpu)`), not
// failed, and match. `everUsable`: as if every node that is not down were up (whether the pool
// could ever fit the request). Nodes with nothing to give get no view: on a busy pool that is most.
// `unheld`, where given, counts per slot the GPUs no lease holds: a node without one is skipped
// untouched (only where `freeOn` frees no held GPU).
template <class Slots, class FreeOn>
std::vector<NodeView> nodeViews(const Slots& slots, const LeaseRequest& r, FreeOn freeOn,
                                bool everUsable = false, const std::vector<uint32_t>* unheld = nullptr) {
  std::vector<NodeView> views;
  for (size_t s = 0; s < slots.size(); ++s) {
    if (unheld && (*unheld)[s] == 0) continue;
    const PoolNode* node = slots[s].node;
    if ((everUsable && node->state == NodeState::kDown) || !nodeMatches(*node, r, everUsable)) continue;
    auto free = freeOn(s, slots[s]);
    NodeView v{node, {}, false};
    for (size_t i = 0; i < node->unitCount(); ++i)
      if (free(i) && (everUsable ? node->placeableOnceLaidOut(i) : node->placeable(i)) &&
          unitMatches(*node, i, r))
        v.usable.push_back(i);
    if (v.usable.empty()) continue;
    v.whole = !r.mig() && v.usable.size() == node->gpuCount();
    views.push_back(std::move(v));
  }
  return views;
}

// Every GPU free: the pool as if no lease were held.
auto allFree(size_t, const auto&) {
  return [](size_t) { return true; };
}

// The GPUs no lease holds now (nor a share of).
auto unheld(size_t, const auto& slot) {
  return [held = slot.held](size_t i) { return held->unheld(i); };
}

// When GPUs are busy as the scheduler plans ahead: running leases until their maximum end (forever
// without one), and the GPUs promised to the waiting requests planned so far.
}  // namespace

// Nodes are known by their index in pool order (`slotOf` names it).
class Timeline {
 public:
  template <class Slots>
  Timeline(const Slots& slots, const std::unordered_map<std::string_view, size_t>& slotOf,
           const std::map<std::string, Lease>& leases, const PreemptOptions& preempt, TimePoint now)
      : slot_of_(slotOf), busy_(slots.size()) {
    for (size_t s = 0; s < slots.size(); ++s) busy_[s].resize(slots[s].node->unitCount());
    // A lease past its end holds its GPUs until a tick drops it (a submit between two ticks
    // plans with it still there): busy now, free an instant later.
    for (const auto& [id, lease] : leases) {
      const TimePoint end = std::max(leaseEnd(lease, preempt), now + TimePoint::duration(1));
      if (!lease.shrink_at) {
        hold(lease.gpus, now, end, &lease);
        continue;
      }
      std::vector<GpuRef> kept;
      for (const GpuRef& g : lease.gpus)
        if (std::find(lease.shrink_gpus.begin(), lease.shrink_gpus.end(), g) == lease.shrink_gpus.end())
          kept.push_back(g);
      hold(kept, now, end, &lease);
      hold(lease.shrink_gpus, now,
           std::min(end, std::max(shrinkEnd(lease, preempt), now + TimePoint::duration(1))), &lease);
    }
    for (size_t s = 0; s < busy_.size(); ++s)
      for (size_t i = 0; i < busy_[s].size(); ++i) by_end_.insert({busy_[s][i].end(), s, i});
    indexed_ = true;
  }

  // The GPUs free for good from t on (every interval of theirs over by t; t not kNever), in the
  // order they become so: f(slot, gpu, since) for each, until f returns false. For a request
  // without a maximum duration these are exactly the GPUs freeOn(slot, t, kNever) calls free,
  // found without a walk over the pool.
  template <class F>
  void freeForGoodBy(TimePoint t, F f) const {
    for (const auto& [end, slot, gpu] : by_end_) {
      if (end > t || !f(slot, gpu, end)) return;
    }
  }

  // What a preemption may take: whole leases, and single GPUs of elastic leases (a shrink), by
  // (slot, GPU). Their GPUs count as free where `freeOn` is given them.
  struct Ignoring {
    std::set<const Lease*> leases;
    std::set<std::pair<size_t, size_t>> gpus;
    bool covers(const Lease* lease, size_t slot, size_t gpu) const {
      return lease != nullptr && (leases.count(lease) || gpus.count({slot, gpu}));
    }
  };

  // When a request may start: now, at every planned end after now, and never (once leases
  // without an end have ended).
  // Only from `from` on (a bound below which the request cannot start).
  // f(t) for each in order, until it returns true (most requests fit at the first: a full pool
  // has thousands of ends to list, so none is listed ahead).
  template <class F>
  void eachStart(TimePoint now, TimePoint from, F f) const {
    if (from <= now && f(now)) return;
    for (auto t = ends_.lower_bound(std::max(from, now)); t != ends_.end(); ++t)
      if (*t > now && *t != kNever && f(*t)) return;
    f(kNever);
  }

  // The earliest time from `now` at which GPU `gpu` of the node at `slot` is free for `length`
  // (kNever: free for good; it is then free from its last end on). kNever where no such time is
  // known (held by a lease or promise without an end).
  TimePoint earliestFree(size_t slot, size_t gpu, TimePoint now, std::optional<seconds> length) const {
    const Gpu& g = busy_[slot][gpu];
    if (!length) return g.max_to.empty() ? now : std::max(now, g.max_to.back());
    TimePoint t = now;
    for (const Interval& iv : g.busy) {  // by start: the first gap of `length` after `now`
      if (iv.to <= t) continue;
      if (iv.from >= addSaturating(t, *length)) return t;
      t = std::max(t, iv.to);
      if (t == kNever) return kNever;
    }
    return t;
  }

  // Per GPU of the node at `slot`: whether it is free from `t` to `to`. From kNever, only promises
  // without an end hold it.
  auto freeOn(size_t slot, TimePoint t, TimePoint to, const Ignoring* ignoring = nullptr) const {
    const std::vector<Gpu>& gpus = busy_.at(slot);
    return [&gpus, slot, t, to, ignoring](size_t i) {
      const Gpu& g = gpus[i];
      if (t == kNever) return !g.endless_promise;  // only a promise without an end holds it then
      if (ignoring == nullptr) {
        // The intervals that begin before `to` are a prefix (sorted by `from`); one of them
        // reaches past t exactly when the latest end among them does.
        auto begun = std::lower_bound(g.busy.begin(), g.busy.end(), to,
                                      [](const Interval& iv, TimePoint x) { return iv.from < x; });
        size_t n = static_cast<size_t>(begun - g.busy.begin());
        return n == 0 || g.max_to[n - 1] <= t;
      }
      return std::none_of(g.busy.begin(), g.busy.end(), [&](const Interval& iv) {
        if (ignoring->covers(iv.lease, slot, i)) return false;
        return iv.from < to && t < iv.to;
      });
    };
  }

  // `gpus` busy from `from` to `to`: held by `lease`, or promised to a waiting request (null).
  void hold(const std::vector<GpuRef>& gpus, TimePoint from, TimePoint to, const Lease* lease) {
    if (to != kNever) ends_.insert(to);
    for (const GpuRef& g : gpus) {
      auto s = slot_of_.find(g.node);
      if (s == slot_of_.end() || g.index >= busy_[s->second].size()) continue;
      Gpu& gpu = busy_[s->second][g.index];
      const TimePoint before = gpu.end();
      auto at = std::upper_bound(gpu.busy.begin(), gpu.busy.end(), from,
                                 [](TimePoint x, const Interval& iv) { return x < iv.from; });
      size_t i = static_cast<size_t>(at - gpu.busy.begin());
      gpu.busy.insert(at, {from, to, lease});
      gpu.endless_promise |= !lease && to == kNever;
      gpu.reckon(i);
      reindex(s->second, g.index, before);
    }
  }

  // A lease chosen as a victim now holds its GPUs (or those of `gpus`, a shrink) only until `end`.
  void endEarly(const Lease& lease, TimePoint end, const std::vector<GpuRef>* gpus = nullptr) {
    ends_.insert(end);
    for (const GpuRef& g : gpus ? *gpus : lease.gpus) {
      auto s = slot_of_.find(g.node);
      if (s == slot_of_.end() || g.index >= busy_[s->second].size()) continue;
      Gpu& gpu = busy_[s->second][g.index];
      const TimePoint before = gpu.end();
      for (Interval& iv : gpu.busy)
        if (iv.lease == &lease) iv.to = std::min(iv.to, end);
      gpu.reckon(0);
      reindex(s->second, g.index, before);
    }
  }

 private:
  struct Interval {
    TimePoint from, to;
    const Lease* lease;  // null: promised to a waiting request
  };
  struct Gpu {
    std::vector<Interval> busy;     // sorted by `from`
    std::vector<TimePoint> max_to;  // per interval: the latest `to` of it and those before it
    bool endless_promise = false;   // a promise without an end
    void reckon(size_t from) {      // max_to again from interval `from` on
      max_to.resize(busy.size());
      for (size_t i = from; i < busy.size(); ++i)
        max_to[i] = i == 0 ? busy[i].to : std::max(max_to[i - 1], busy[i].to);
    }
    // From when it is free for good; TimePoint::min() when never busy.
    TimePoint end() const { return max_to.empty() ? TimePoint::min() : max_to.back(); }
  };
  void reindex(size_t slot, size_t gpu, TimePoint before) {
    if (!indexed_) return;
    TimePoint after = busy_[slot][gpu].end();
    if (after == before) return;
    by_end_.erase({before, slot, gpu});
    by_end_.insert({after, slot, gpu});
  }
  std::set<std::tuple<TimePoint, size_t, size_t>> by_end_;  // (free for good from, slot, GPU)
  bool indexed_ = false;
  const std::unordered_map<std::string_view, size_t>& slot_of_;
  std::vector<std::vector<Gpu>> busy_;  // per node (slot), per GPU
  std::set<TimePoint> ends_;
};

void Dirty::merge(const Dirty& other) {
  nodes.insert(other.nodes.begin(), other.nodes.end());
  requests.insert(other.requests.begin(), other.requests.end());
  leases.insert(other.leases.begin(), other.leases.end());
  new_leases.insert(other.new_leases.begin(), other.new_leases.end());
  resized.insert(other.resized.begin(), other.resized.end());
  queue.insert(other.queue.begin(), other.queue.end());
  counters = counters || other.counters;
}

void validateRequest(const LeaseRequest& r) {
  auto bad = [](const std::string& what) { throw badInput("bad lease request: " + what); };
  if (r.gpus < 1) bad("gpus " + std::to_string(r.gpus) + " (ask for at least 1 GPU)");
  if (r.gpus > 1'000'000) bad("gpus " + std::to_string(r.gpus) + " (more than any pool has)");
  if (r.gpus_per_node < 0) bad("gpus_per_node " + std::to_string(r.gpus_per_node) + " (use 0 for any split)");
  if (r.gpus_per_node > 0 && r.gpus % r.gpus_per_node != 0)
    bad("gpus " + std::to_string(r.gpus) + " is not a multiple of gpus_per_node " +
        std::to_string(r.gpus_per_node));
  if (r.gpus_per_node > 0 && r.whole_nodes) bad("give either gpus_per_node or whole_nodes, not both");
  if (r.owner.empty()) bad("no owner");
  if (r.ttl < seconds(1)) bad("ttl " + std::to_string(r.ttl.count()) + "s (at least 1 s)");
  if (r.max_duration && *r.max_duration < seconds(1))
    bad("max_duration " + std::to_string(r.max_duration->count()) + "s (at least 1 s)");
  if (r.wait && *r.wait < seconds(0)) bad("wait " + std::to_string(r.wait->count()) + "s (0 or more)");
  if (r.mig()) {
    topo::checkText(r.mig_profile, kMaxMigProfileBytes, "bad lease request: mig_profile");
    const std::string what = "mig_profile " + r.mig_profile + " with ";
    if (r.whole_nodes) bad(what + "whole_nodes: MIG instances are leased one by one; drop whole_nodes");
    if (r.gpus_per_node > 0)
      bad(what + "gpus_per_node: MIG instances are packed onto the fewest GPUs; drop it");
    if (r.max_gpus > 0) bad(what + "max_gpus: MIG leases are not elastic; ask for a fixed number");
  } else if (r.mig_or_larger) {
    bad("mig_or_larger without mig_profile (name the smallest profile that will do)");
  }
  if (r.share_percent < 0 || r.share_percent > 100)
    bad("share_percent " + std::to_string(r.share_percent) + " (1 to 100 percent of a GPU's SMs)");
  if (r.shared()) {
    const std::string what = "an MPS share with ";
    if (r.mig()) bad(what + "mig_profile: a MIG instance is not shared; ask for one or the other");
    if (r.whole_nodes) bad(what + "whole_nodes: shares are leased one per rank; drop whole_nodes");
    if (r.gpus_per_node > 0) bad(what + "gpus_per_node: shares are packed onto the fewest nodes; drop it");
    if (r.max_gpus > 0) bad(what + "max_gpus: MPS leases are not elastic; ask for a fixed number");
  }
  if (r.max_gpus == 0) return;
  const std::string range = "elastic " + std::to_string(r.gpus) + ":" + std::to_string(r.max_gpus);
  if (r.max_gpus < r.gpus || r.max_gpus > 1'000'000)
    bad(range + ": the most (max_gpus) must be at least the least (gpus) and at most 1000000");
  if (r.gpus_per_node > 0 && r.max_gpus % r.gpus_per_node != 0)
    bad(range + ": max_gpus " + std::to_string(r.max_gpus) + " is not a multiple of gpus_per_node " +
        std::to_string(r.gpus_per_node));
  if (r.whole_nodes)
    bad(range +
        " with whole_nodes: an elastic lease grows and shrinks by GPUs; ask for gpus_per_node "
        "(the node's GPU count) instead");
  if (r.resize_interval < seconds(0))
    bad("resize_interval " + std::to_string(r.resize_interval.count()) + "s (0 or more)");
}

void PoolNode::setTopology(std::shared_ptr<const topo::NodeTopology> t) {
  topology = std::move(t);
  mig_units = topology ? topo::migUnits(*topology) : std::vector<topo::MigUnit>{};
  gpu_in_mig.assign(gpuCount(), 0);
  for (size_t i = 0; i < gpuCount(); ++i) gpu_in_mig[i] = inMigMode(topology->gpus[i]) ? 1 : 0;
}

PoolState::Occupancy& PoolState::occupancy(const std::string& node) {
  Occupancy& o = occupancy_[node];
  auto it = nodes_.find(node);
  size_t n = it == nodes_.end() ? 0 : it->second.unitCount();
  if (o.holder.size() < n) {
    o.holder.resize(n);
    slotsChanged();
  }
  return o;
}

void PoolState::registerNode(const topo::ClusterNode& cn, bool endLostInstances) {
  if (cn.name.empty()) throw badInput("cannot register a node without a name");
  topo::checkNodeName(cn.name, "cannot register node");  // the last guard, whatever the entry point
  if (!cn.topology) throw badInput("cannot register node " + cn.name + " without a topology");
  const size_t count = cn.topology->gpus.size();
  std::vector<topo::MigUnit> units = topo::migUnits(*cn.topology);
  auto unitOf = [&](const std::string& uuid) -> std::optional<size_t> {
    for (size_t k = 0; k < units.size(); ++k)
      if (cn.topology->gpus[units[k].gpu].mig.instances[units[k].instance].uuid == uuid) return count + k;
    return std::nullopt;
  };
  // An agent reporting a layout without an instance a lease holds: the instance is gone from under
  // the job, so is the lease (an administrator's registration is refused instead, below).
  if (auto it = nodes_.find(cn.name); endLostInstances && it != nodes_.end()) {
    const PoolNode& old = it->second;
    const Occupancy& o = occupancy(cn.name);
    std::map<std::string, std::string> lost;  // lease: why
    for (size_t i = old.gpuCount(); i < o.holder.size(); ++i) {
      const topo::MigInstance* held = old.migInstance(i);
      if (!o.holder[i].empty() && held && !unitOf(held->uuid))
        lost.try_emplace(o.holder[i], "ended: its MIG instance " + held->uuid + " (GPU" +
                                          std::to_string(old.gpuOf(i)) + " of " + cn.name +
                                          ") is gone, as the node's agent reports");
    }
    for (auto& [id, why] : lost) {
      dropLease(id, LeaseEvent::Kind::kReleased, why);
      endedByPool(id, std::move(why));
    }
  }
  // The units held by leases in the new numbering: a GPU keeps its index, a MIG instance is found
  // again by its UUID. Checked whole before anything changes.
  std::map<size_t, size_t> moved;  // held MIG unit: its number in the new topology
  auto it = nodes_.find(cn.name);
  const size_t gpusBefore = it == nodes_.end() ? 0 : it->second.gpuCount();
  if (it != nodes_.end()) {
    const PoolNode& old = it->second;
    const Occupancy& o = occupancy(cn.name);
    for (size_t i = 0; i < o.holder.size(); ++i) {
      if (o.holder[i].empty()) continue;
      if (!old.isMigUnit(i)) {
        if (i >= count)
          throw badInput("node " + cn.name + " would lose GPU" + std::to_string(i) + ", held by lease " +
                         o.holder[i] + "; release it before registering the smaller topology");
        continue;
      }
      const topo::MigInstance* held = old.migInstance(i);
      std::optional<size_t> found = held ? unitOf(held->uuid) : std::nullopt;
      if (!found)
        throw badInput("node " + cn.name + " would lose MIG instance " + (held ? held->uuid : "?") +
                       " of GPU" + std::to_string(old.gpuOf(i)) + ", held by lease " + o.holder[i] +
                       "; release it before registering a topology without it");
      moved[i] = *found;
    }
    for (const auto& [gpu, ids] : o.sharers)
      if (gpu >= count)
        throw badInput("node " + cn.name + " would lose GPU" + std::to_string(gpu) + ", shared by lease " +
                       ids.front() + "; release it before registering the smaller topology");
  }
  PoolNode& node = nodes_[cn.name];
  if (it == nodes_.end()) {
    node.order = next_order_++;
    slotsChanged();
  }
  node.name = cn.name;
  node.setTopology(cn.topology);
  node.switch_name = cn.switch_name;
  node.rail_group = cn.rail_group;
  node.fabric = cn.fabric;
  node.labels = cn.labels;
  node.topology_hash = topologyHash(*cn.topology);
  replan_ = true;
  std::erase_if(node.failed, [&](size_t i) { return i >= node.gpuCount(); });
  std::erase_if(node.failures, [&](const auto& f) { return !node.failed.count(f.first); });
  if (node.live.gpus.size() > node.gpuCount()) node.live.gpus.resize(node.gpuCount());
  std::vector<std::string>& holder = occupancy_[cn.name].holder;
  std::vector<std::string> renumbered(node.unitCount());
  for (size_t i = 0; i < holder.size() && i < std::min(count, gpusBefore); ++i)
    renumbered[i] = std::move(holder[i]);
  for (const auto& [from, to] : moved) {
    renumbered[to] = holder[from];
    if (from == to) continue;
    Lease& lease = leases_.at(holder[from]);
    for (GpuRef& g : lease.gpus)
      if (g.node == cn.name && g.index == from) g.index = to;
    std::sort(lease.gpus.begin(), lease.gpus.end(), [&](const GpuRef& a, const GpuRef& b) {
      return a.node == b.node ? a.index < b.index : nodes_.at(a.node).order < nodes_.at(b.node).order;
    });
    dirty_.leases.insert(lease.id);
    dirty_.resized.insert(lease.id);  // its units are written again
  }
  holder = std::move(renumbered);
  slotsChanged();
  dirty_.nodes.insert(cn.name);
}

void PoolState::setNodeState(const std::string& name, NodeState state) {
  auto it = nodes_.find(name);
  if (it == nodes_.end())
    throw Error(ErrorCode::kNotFound, "no node '" + name + "' in the pool (see `poolctl nodes`)");
  it->second.state = state;
  replan_ = true;
  dirty_.nodes.insert(name);
}

void PoolState::failGpu(const std::string& name, size_t index, TimePoint now) {
  auto it = nodes_.find(name);
  if (it == nodes_.end())
    throw Error(ErrorCode::kNotFound, "no node '" + name + "' in the pool (see `poolctl nodes`)");
  if (index >= it->second.gpuCount())
    throw badInput("bad GPU index " + std::to_string(index) + " (node " + name + " has " +
                   std::to_string(it->second.gpuCount()) + " GPUs)");
  it->second.failed.insert(index);
  replan_ = true;
  it->second.failures.try_emplace(index, GpuFailure{"marked failed by an administrator", now});
  dirty_.nodes.insert(name);
}

const std::vector<PoolState::Slot>& PoolState::slots() const {
  SlotCache& c = slot_cache_;
  if (!c.stale) return c.slots;
  c.slots.clear();
  c.index.clear();
  c.unheld.clear();
  for (const auto& [name, node] : nodes_) c.slots.push_back({&node, &occupancy_.at(name)});
  std::sort(c.slots.begin(), c.slots.end(),
            [](const Slot& a, const Slot& b) { return a.node->order < b.node->order; });
  for (size_t s = 0; s < c.slots.size(); ++s) {
    c.index.emplace(c.slots[s].node->name, s);
    c.unheld.push_back(freeCount(*c.slots[s].held));
  }
  c.stale = false;
  return c.slots;
}

uint32_t PoolState::freeCount(const Occupancy& o) {
  return static_cast<uint32_t>(
      std::count_if(o.holder.begin(), o.holder.end(), [](const std::string& h) { return h.empty(); }) -
      static_cast<std::ptrdiff_t>(o.sharers.size()));
}

void PoolState::addSharer(const std::string& node, size_t gpu, const std::string& id) {
  Occupancy& o = occupancy(node);
  if (gpu >= o.holder.size() || !o.holder[gpu].empty())
    throw Error(ErrorCode::kInternal, "a share of " + node + ":" + std::to_string(gpu) + " for lease " + id +
                                          (gpu < o.holder.size() ? ", held whole by " + o.holder[gpu]
                                                                 : ", which the node does not have"));
  std::vector<std::string>& list = o.sharers[gpu];
  if (list.empty()) heldChanged(node, true);
  list.push_back(id);
}

void PoolState::removeSharer(const std::string& node, size_t gpu, const std::string& id) {
  auto o = occupancy_.find(node);
  if (o == occupancy_.end()) return;
  auto it = o->second.sharers.find(gpu);
  if (it == o->second.sharers.end()) return;
  std::erase(it->second, id);
  if (!it->second.empty()) return;
  o->second.sharers.erase(it);
  heldChanged(node, false);
}

PoolState::ShareUse PoolState::shareUse(const Occupancy& held, size_t gpu) const {
  ShareUse use;
  auto it = held.sharers.find(gpu);
  if (it == held.sharers.end()) return use;
  for (const std::string& id : it->second) {
    const Lease& lease = leases_.at(id);
    for (const GpuRef& g : lease.gpus)
      if (g.share && g.index == gpu && &occupancy_.at(g.node) == &held) {
        use.percent += g.share_percent;
        use.memory += g.share_memory;
      }
    ++use.clients;
    use.owner = &lease.owner;
    use.end = std::max(use.end, leaseEnd(lease, preempt_));
  }
  return use;
}

// The nodes of the pool (in pool order) with the GPUs that can take one share of `r` each: a GPU
// no lease holds (`freeGpu(slot, gpu)`: free now, or in the plan), or one whose shares are of the
// same owner and leave room for it (percent, memory and clients). `everUsable`: whether the pool
// could ever fit it (every GPU that is not failed counts as free). `endBy`: where the scheduler has
// promised GPUs to waiting requests, a share is added to a shared GPU only if its lease ends no
// later than the shares there (it then delays nobody planned to take the GPU after them).
template <class FreeGpu>
std::vector<NodeView> PoolState::shareViews(const LeaseRequest& r, FreeGpu freeGpu, bool everUsable,
                                            std::optional<TimePoint> endBy) const {
  std::vector<NodeView> views;
  const std::vector<Slot>& inOrder = slots();
  for (size_t s = 0; s < inOrder.size(); ++s) {
    const PoolNode& node = *inOrder[s].node;
    if ((everUsable && node.state == NodeState::kDown) || !nodeMatches(node, r, everUsable)) continue;
    NodeView v{&node, {}, false};
    for (size_t i = 0; i < node.gpuCount(); ++i) {
      const topo::Gpu& gpu = node.topology->gpus[i];
      if (!(everUsable ? node.placeableOnceLaidOut(i) : node.placeable(i)) || !gpuMatches(gpu, r)) continue;
      const uint64_t memory = shareMemory(node, i, r), total = node.memoryOf(i);
      const bool memoryKnown = total > 0;
      if (r.share_memory_bytes > 0 && (!memoryKnown || memory > total)) continue;
      const Occupancy& held = *inOrder[s].held;
      int room = 100;
      if (everUsable || !held.sharers.count(i)) {
        if (!everUsable && !freeGpu(s, i)) continue;
      } else {
        const ShareUse use = shareUse(held, i);
        if (*use.owner != r.owner || use.clients >= kMaxMpsClients || use.percent + r.share_percent > 100 ||
            (memoryKnown && use.memory + memory > total) || (endBy && *endBy > use.end))
          continue;
        room = 100 - use.percent;
      }
      v.usable.push_back(i);
      v.room.push_back(room);
    }
    if (v.usable.empty()) continue;
    v.whole = v.usable.size() == node.gpuCount();
    views.push_back(std::move(v));
  }
  return views;
}

void PoolState::heldChanged(const std::string& node, bool held) {
  ++plan_epoch_;  // what the kept plan holds is no longer what the leases hold
  SlotCache& c = slot_cache_;
  if (c.stale) return;  // counted afresh when rebuilt
  auto it = c.index.find(node);
  if (it == c.index.end()) return;
  uint32_t& n = c.unheld[it->second];
  n = held ? n - 1 : n + 1;
}

std::string PoolState::checkInvariants() const {
  std::map<std::pair<std::string, size_t>, std::string> byLease;
  for (const auto& [id, lease] : leases_)
    for (const GpuRef& g : lease.gpus)
      if (!g.share && !byLease.emplace(std::pair{g.node, g.index}, id).second)
        return "GPU " + g.node + ":" + std::to_string(g.index) + " is in two leases";
  for (const auto& [name, o] : occupancy_)
    for (size_t i = 0; i < o.holder.size(); ++i) {
      auto lease = byLease.find({name, i});
      const std::string expected = lease == byLease.end() ? "" : lease->second;
      if (o.holder[i] != expected)
        return "GPU " + name + ":" + std::to_string(i) + " is held by '" + o.holder[i] +
               "', its lease says '" + expected + "'";
    }
  for (const auto& [name, o] : occupancy_)
    for (const auto& [gpu, ids] : o.sharers) {
      if (ids.empty()) return "GPU " + name + ":" + std::to_string(gpu) + " has an empty list of sharers";
      if (gpu < o.holder.size() && !o.holder[gpu].empty())
        return "GPU " + name + ":" + std::to_string(gpu) + " is held by " + o.holder[gpu] + " and shared";
      for (const std::string& id : ids) {
        auto l = leases_.find(id);
        if (l == leases_.end() || std::none_of(l->second.gpus.begin(), l->second.gpus.end(),
                                               [&, &node = name, index = gpu](const GpuRef& g) {
                                                 return g.share && g.node == node && g.index == index;
                                               }))
          return "GPU " + name + ":" + std::to_string(gpu) + " counts a share of '" + id +
                 "', which has none";
        if (l->second.owner != leases_.at(ids.front()).owner)
          return "GPU " + name + ":" + std::to_string(gpu) + " is shared by two owners";
      }
      if (shareUse(o, gpu).percent > 100)
        return "the shares of GPU " + name + ":" + std::to_string(gpu) + " add up to more than 100%";
    }
  for (const auto& [id, lease] : leases_)
    for (const GpuRef& g : lease.gpus) {
      if (!g.share) continue;
      const std::vector<std::string>* ids = nullptr;
      if (auto o = occupancy_.find(g.node); o != occupancy_.end())
        if (auto sh = o->second.sharers.find(g.index); sh != o->second.sharers.end()) ids = &sh->second;
      if (!ids || std::find(ids->begin(), ids->end(), id) == ids->end())
        return "lease " + id + "'s share of " + g.node + ":" + std::to_string(g.index) + " is not counted";
    }
  std::unordered_map<std::string, size_t> queued;
  for (const auto& [ticket, e] : queue_) ++queued[e.request.owner];
  const size_t waitingNow =
      static_cast<size_t>(std::count_if(queue_.begin(), queue_.end(), [](const auto& q) {
        return q.second.status == QueueEntry::Status::kWaiting;
      }));
  if (waitingNow != waiting_count_)
    return "the count of waiting requests is " + std::to_string(waiting_count_) + ", the queue has " +
           std::to_string(waitingNow);
  if (queued != queued_by_owner_)
    return "the count of queued requests per owner (" + std::to_string(queued_by_owner_.size()) +
           " owners) does not match the queue's entries (" + std::to_string(queued.size()) + " owners)";
  const SlotCache& c = slot_cache_;
  if (c.stale) return "";
  if (c.slots.size() != nodes_.size())
    return "the placement cache has " + std::to_string(c.slots.size()) + " nodes of " +
           std::to_string(nodes_.size());
  for (size_t s = 0; s < c.slots.size(); ++s)
    if (freeCount(*c.slots[s].held) != c.unheld[s])
      return "the placement cache counts " + std::to_string(c.unheld[s]) + " free GPUs on " +
             c.slots[s].node->name + ", which has " + std::to_string(freeCount(*c.slots[s].held));
  return "";
}

std::vector<const PoolNode*> PoolState::nodesInOrder() const {
  std::vector<const PoolNode*> out;
  for (const Slot& s : slots()) out.push_back(s.node);
  return out;
}

const std::string* PoolState::holder(const std::string& node, size_t index) const {
  auto it = occupancy_.find(node);
  if (it == occupancy_.end() || index >= it->second.holder.size()) return nullptr;
  const std::string& h = it->second.holder[index];
  if (h.empty())
    if (auto sh = it->second.sharers.find(index); sh != it->second.sharers.end()) return &sh->second.front();
  return h.empty() ? nullptr : &h;
}

void PoolState::gpusOf(const PoolNode& node, std::vector<GpuUse>& out) const {
  out.assign(node.gpuCount(), GpuUse{});
  auto o = occupancy_.find(node.name);
  for (size_t i = 0; i < node.gpuCount(); ++i) {
    GpuUse& u = out[i];
    if (o != occupancy_.end()) {
      const Occupancy& held = o->second;
      if (i < held.holder.size() && !held.holder[i].empty())
        u.lease = &held.holder[i];
      else if (auto sh = held.sharers.find(i); sh != held.sharers.end())
        u.lease = &sh->second.front();
    }
    u.state = node.failed.count(i)         ? GpuState::kFailed
              : node.live.foreign.count(i) ? GpuState::kForeign
              : u.lease                    ? GpuState::kLeased
              : (i < node.gpu_in_mig.size() ? node.gpu_in_mig[i] != 0 : inMigMode(node.topology->gpus[i]))
                  ? GpuState::kMig
                  : GpuState::kFree;
  }
}

GpuState PoolState::gpuState(const std::string& node, size_t index) const {
  auto it = nodes_.find(node);
  if (it != nodes_.end() && it->second.failed.count(index)) return GpuState::kFailed;
  if (it != nodes_.end() && it->second.live.foreign.count(index)) return GpuState::kForeign;
  if (holder(node, index)) return GpuState::kLeased;
  if (it != nodes_.end() && index < it->second.gpuCount() && inMigMode(it->second.topology->gpus[index]))
    return GpuState::kMig;
  return GpuState::kFree;
}

bool PoolState::everFits(const LeaseRequest& request) const {
  // Every GPU that is not failed on a node that is not down (draining ones come back), as if no
  // lease were held.
  if (request.shared())
    return place(shareViews(
                     request, [](size_t, size_t) { return true; }, true, std::nullopt),
                 request)
        .has_value();
  return place(nodeViews(slots(), request, allFree<Slot>, true), request).has_value();
}

std::vector<const QueueEntry*> PoolState::waitingInOrder() const {
  std::vector<const QueueEntry*> out;
  for (const auto& [t, e] : queue_)
    if (e.status == QueueEntry::Status::kWaiting) out.push_back(&e);
  std::sort(out.begin(), out.end(), [](const QueueEntry* a, const QueueEntry* b) {
    if (a->request.priority != b->request.priority) return a->request.priority > b->request.priority;
    if (a->enqueued != b->enqueued) return a->enqueued < b->enqueued;
    return a->ticket < b->ticket;
  });
  return out;
}

Lease PoolState::grant(const LeaseRequest& request, std::vector<GpuRef> gpus, TimePoint now) {
  Lease lease;
  do lease.id = newLeaseId();
  while (leases_.count(lease.id));
  lease.owner = request.owner;
  lease.job_name = request.job_name;
  lease.gpus = std::move(gpus);
  lease.priority = request.priority;
  lease.created = now;
  lease.ttl = request.ttl;
  lease.no_reclaim = request.no_reclaim;
  lease.preemptible = request.preemptible;
  lease.preempt_grace = preempt_.grace;
  lease.resized = now;
  if (request.elastic()) lease.elastic = request;
  if (request.max_duration) lease.max_end = addSaturating(now, *request.max_duration);
  lease.expires = std::min(addSaturating(now, request.ttl), lease.max_end.value_or(kNever));
  for (GpuRef& g : lease.gpus) {
    if (g.share) {
      addSharer(g.node, g.index, lease.id);
      continue;
    }
    if (const topo::MigInstance* m = nodes_.at(g.node).migInstance(g.index)) g.mig = m->uuid;
    std::string& h = occupancy(g.node).holder.at(g.index);
    if (!h.empty())
      throw Error(ErrorCode::kInternal,
                  "placement chose " + g.node + ":" + std::to_string(g.index) + ", held by " + h);
    h = lease.id;
    heldChanged(g.node, true);
  }
  leases_[lease.id] = lease;
  if (lease.elastic) elastic_leases_.insert(lease.id);
  last_busy_[lease.id] = now;
  lease_events_.push_back({LeaseEvent::Kind::kGranted, lease, {}});
  ++leases_granted_;
  dirty_.counters = true;
  dirty_.leases.insert(lease.id);
  dirty_.new_leases.insert(lease.id);
  return lease;
}

void PoolState::dropLease(const std::string& id, LeaseEvent::Kind end, std::string reason) {
  auto it = leases_.find(id);
  if (it == leases_.end()) return;
  lease_events_.push_back({end, it->second, std::move(reason)});
  replan_ = true;
  for (const GpuRef& g : it->second.gpus) {
    if (g.share) {
      removeSharer(g.node, g.index, id);
      continue;
    }
    auto o = occupancy_.find(g.node);
    if (o != occupancy_.end() && g.index < o->second.holder.size() && o->second.holder[g.index] == id) {
      o->second.holder[g.index].clear();
      heldChanged(g.node, false);
    }
  }
  leases_.erase(it);
  elastic_leases_.erase(id);
  last_busy_.erase(id);
  reclaim_at_.erase(id);
  dirty_.leases.insert(id);
  dirty_.new_leases.erase(id);
  dirty_.resized.erase(id);
}

void PoolState::endedByPool(const std::string& id, std::string why) {
  if (ended_by_pool_.size() >= 10000) ended_by_pool_.erase(ended_by_pool_.begin());
  ended_by_pool_[id] = std::move(why);
}

Lease PoolState::grantQueued(const QueueEntry& entry, const std::vector<GpuRef>& gpus, TimePoint now) {
  Lease lease = grant(entry.request, gpus, now);
  planned_[entry.ticket] = now;
  QueueEntry& e = queue_.at(entry.ticket);
  if (e.status == QueueEntry::Status::kWaiting) --waiting_count_;
  e.status = QueueEntry::Status::kGranted;
  e.lease_id = lease.id;
  dirty_.queue.insert(e.ticket);
  wait_seconds_.push_back(std::chrono::duration<double>(now - e.enqueued).count());
  return lease;
}

PoolState::QuotaBook PoolState::quotaBook() const {
  QuotaBook book;
  if (quotas_.empty()) return book;
  std::map<const Quota*, std::vector<const Lease*>> held;
  for (const auto& [id, lease] : leases_)
    if (const Quota* q = quotas_.of(lease.owner)) held[q].push_back(&lease);
  for (auto& [q, leases] : held) {
    std::sort(leases.begin(), leases.end(), [](const Lease* a, const Lease* b) {
      return a->created != b->created ? a->created < b->created : a->id < b->id;
    });
    int used = 0;
    for (const Lease* l : leases) {
      used += static_cast<int>(l->gpus.size());
      if (used > q->guaranteed) book.borrowed.insert(l);
    }
    book.used[q] = used;
  }
  return book;
}

std::string PoolState::overLimit(const LeaseRequest& r, const QuotaBook& book) const {
  const Quota* q = quotas_.of(r.owner);
  if (q == nullptr || !q->limit) return "";
  auto used = book.used.find(q);
  int held = used == book.used.end() ? 0 : used->second;
  if (held + r.gpus <= *q->limit) return "";
  return (q->kind == Quota::Kind::kGroup ? "group " + q->name + " of " + r.owner : "owner " + r.owner) +
         " holds " + std::to_string(held) + " of its limit of " + std::to_string(*q->limit) + " GPUs";
}

std::vector<QuotaUse> PoolState::quotaUse() const {
  QuotaBook book = quotaBook();
  std::vector<QuotaUse> out;
  for (const Quota& q : quotas_.entries) {
    QuotaUse u;
    u.quota = q;
    if (auto it = book.used.find(&q); it != book.used.end()) u.used = it->second;
    u.borrowed = std::max(0, u.used - q.guaranteed);
    for (const auto& [t, e] : queue_)
      if (e.status == QueueEntry::Status::kWaiting && quotas_.of(e.request.owner) == &q)
        u.waiting += e.request.gpus;
    out.push_back(std::move(u));
  }
  return out;
}

std::vector<const Lease*> PoolState::victimCandidates(TimePoint now, const QuotaBook& book) const {
  std::vector<const Lease*> out;
  // Not MPS shares: a GPU is freed by ending all its shares, which a victim of one lease cannot do.
  for (const auto& [id, lease] : leases_)
    if ((lease.preemptible || book.borrowed.count(&lease)) && !lease.preempt_at &&
        now - lease.created >= preempt_.min_runtime && (lease.gpus.empty() || !lease.gpus.front().share))
      out.push_back(&lease);
  std::sort(out.begin(), out.end(), [](const Lease* a, const Lease* b) {
    if (a->gpus.size() != b->gpus.size()) return a->gpus.size() < b->gpus.size();
    if (a->created != b->created) return a->created > b->created;
    return a->id < b->id;
  });
  return out;
}

bool PoolState::preemptFor(const QueueEntry& entry, Timeline& timeline, const std::vector<const Lease*>& pool,
                           const std::vector<const Lease*>& elastic, const QuotaBook& book, TimePoint now) {
  const LeaseRequest& r = entry.request;
  if (r.wait && *r.wait == seconds(0)) return false;  // it will not wait for the grace: no notice for it
  // An owner within its guarantee takes back what others borrowed, whatever their priority.
  const Quota* mine = quotas_.of(r.owner);
  const int mineUsed = mine && book.used.count(mine) ? book.used.at(mine) : 0;
  const bool withinGuarantee = mine != nullptr && mineUsed + r.gpus <= mine->guaranteed;
  auto reclaimable = [&](const Lease* l) {
    return withinGuarantee && book.borrowed.count(l) && quotas_.of(l->owner) != mine;
  };
  auto mayTake = [&](const Lease* l) { return reclaimable(l) || l->priority < r.priority; };
  // What may be taken, in the order it is taken: first what elastic leases hold beyond their
  // minimum (a shrink instead of a preemption), a GPU at a time from the end of each lease (a node's
  // GPUs at a time for a per-node shape), so that a shrink gives back no more than the request
  // needs; then whole leases, in the pool's order (the smallest first, then the youngest),
  // borrowed GPUs first.
  struct Unit {
    const Lease* lease;
    std::vector<GpuRef> gpus;  // a shrink's; empty: the whole lease
  };
  std::vector<Unit> cands;
  // An owner within its guarantee shrinks what others borrowed first, then the rest (`elastic` is in
  // the pool's order: the lowest priority first, then the youngest).
  for (const bool borrowedPass : {true, false})
    for (const Lease* l : elastic) {
      if (l->preempt_at || l->shrink_at || now - l->created < preempt_.min_runtime || !mayTake(l)) continue;
      if (reclaimable(l) != borrowedPass) continue;
      const size_t step = static_cast<size_t>(std::max(1, l->elastic->gpus_per_node));
      const size_t keep = static_cast<size_t>(l->elastic->gpus);
      for (size_t end = l->gpus.size(); end >= keep + step; end -= step)
        cands.push_back({l, std::vector<GpuRef>(l->gpus.begin() + static_cast<long>(end - step),
                                                l->gpus.begin() + static_cast<long>(end))});
    }
  std::set<const Lease*> reclaimed;
  for (const Lease* l : pool)
    if (!l->preempt_at && reclaimable(l)) {
      cands.push_back({l, {}});
      reclaimed.insert(l);
    }
  for (const Lease* l : pool)
    if (!l->preempt_at && !reclaimable(l) && l->priority < r.priority) cands.push_back({l, {}});
  if (cands.empty()) return false;
  // Placed where it would start: once the victims have had their grace and the kill margin.
  const TimePoint from = addSaturating(now, preempt_.grace + preempt_.kill_margin);
  const TimePoint to = r.max_duration ? addSaturating(from, *r.max_duration) : kNever;
  using Chosen = std::set<size_t>;  // indexes into cands
  auto ignoring = [&](const Chosen& chosen) {
    Timeline::Ignoring out;
    for (size_t u : chosen) {
      if (cands[u].gpus.empty()) out.leases.insert(cands[u].lease);
      for (const GpuRef& g : cands[u].gpus)
        if (auto at = slot_cache_.index.find(g.node); at != slot_cache_.index.end())
          out.gpus.insert({at->second, g.index});
    }
    return out;
  };
  // The GPUs the request could use from `from` were every candidate taken, each with the
  // candidates that free it (its lease whole, a shrink of it; none where it is free anyway): a
  // placement for a set of candidates then reads flags rather than the timeline, over these GPUs
  // only (a pass chooses victims for many requests, each with a dozen placements, on pools of
  // 100,000 GPUs).
  struct Reach {
    size_t slot, gpu;
    int whole = -1, shrink = -1;  // the candidates that free it; both -1: free anyway
  };
  std::vector<Reach> reach;
  {
    std::unordered_map<const Lease*, int> wholeUnit;
    std::map<std::pair<size_t, size_t>, int> shrinkUnit;
    Chosen all;
    for (size_t u = 0; u < cands.size(); ++u) {
      all.insert(u);
      if (cands[u].gpus.empty()) wholeUnit[cands[u].lease] = static_cast<int>(u);
      for (const GpuRef& g : cands[u].gpus)
        if (auto at = slot_cache_.index.find(g.node); at != slot_cache_.index.end())
          shrinkUnit[{at->second, g.index}] = static_cast<int>(u);
    }
    const Timeline::Ignoring everything = ignoring(all);
    const std::vector<Slot>& inOrder = slots();
    for (size_t slot = 0; slot < inOrder.size(); ++slot) {
      const PoolNode& node = *inOrder[slot].node;
      if (!nodeMatches(node, r)) continue;
      auto freeTaking = timeline.freeOn(slot, from, to, &everything);
      auto freeAnyway = timeline.freeOn(slot, from, to);
      const std::vector<std::string>& held = inOrder[slot].held->holder;
      for (size_t i = 0; i < node.unitCount(); ++i) {
        if (!node.placeable(i) || !unitMatches(node, i, r) || !freeTaking(i)) continue;
        Reach x{slot, i};
        if (!freeAnyway(i)) {
          if (i < held.size() && !held[i].empty())
            if (auto w = wholeUnit.find(&leases_.at(held[i])); w != wholeUnit.end()) x.whole = w->second;
          if (auto sh = shrinkUnit.find({slot, i}); sh != shrinkUnit.end()) x.shrink = sh->second;
          if (x.whole < 0 && x.shrink < 0) continue;
        }
        reach.push_back(x);
      }
    }
  }
  auto placeIgnoring = [&](const Chosen& chosen) {
    std::vector<char> taken(cands.size(), 0);
    for (size_t u : chosen) taken[u] = 1;
    std::vector<NodeView> views;
    for (const Reach& x : reach) {
      const bool free = (x.whole < 0 && x.shrink < 0) ||
                        (x.whole >= 0 && taken[static_cast<size_t>(x.whole)]) ||
                        (x.shrink >= 0 && taken[static_cast<size_t>(x.shrink)]);
      if (!free) continue;
      const PoolNode* node = slots()[x.slot].node;
      if (views.empty() || views.back().node != node) views.push_back({node, {}, false});
      views.back().usable.push_back(x.gpu);
    }
    for (NodeView& v : views) v.whole = !r.mig() && v.usable.size() == v.node->gpuCount();
    return place(views, r);
  };
  auto prefix = [&](size_t k) {
    Chosen out;
    for (size_t u = 0; u < k; ++u) out.insert(u);
    return out;
  };
  if (!placeIgnoring(prefix(cands.size()))) return false;  // not even every candidate would make room
  // The shortest run of candidates that makes room (room only grows with the run).
  size_t lo = 1, hi = cands.size();
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (placeIgnoring(prefix(mid)))
      hi = mid;
    else
      lo = mid + 1;
  }
  // Of those, the ones whose GPUs the placement takes; then each whole lease it can do without is
  // spared, the largest first, then the oldest (a shrink's GPUs are few, and taken in order: the
  // shortest run already gives back no more than it must).
  auto takenFrom = [&](const std::vector<GpuRef>& gpus, const Chosen& among) {
    Chosen out;
    for (const GpuRef& g : gpus) {
      const std::string* h = holder(g.node, g.index);
      if (!h) continue;
      const Lease* l = &leases_.at(*h);
      for (size_t u : among)
        if (cands[u].lease == l &&
            (cands[u].gpus.empty() ||
             std::find(cands[u].gpus.begin(), cands[u].gpus.end(), g) != cands[u].gpus.end()))
          out.insert(u);
    }
    return out;
  };
  Chosen chosen = prefix(lo);
  chosen = takenFrom(*placeIgnoring(chosen), chosen);
  auto size = [&](size_t u) {
    return cands[u].gpus.empty() ? cands[u].lease->gpus.size() : cands[u].gpus.size();
  };
  std::vector<size_t> spareOrder;
  for (size_t u : chosen)
    if (cands[u].gpus.empty()) spareOrder.push_back(u);
  std::sort(spareOrder.begin(), spareOrder.end(), [&](size_t a, size_t b) {
    const Lease* la = cands[a].lease;
    const Lease* lb = cands[b].lease;
    if (size(a) != size(b)) return size(a) > size(b);
    if (la->created != lb->created) return la->created < lb->created;
    if (la->id != lb->id) return la->id < lb->id;
    return a < b;
  });
  for (size_t u : spareOrder) {
    if (!chosen.count(u)) continue;
    Chosen without = chosen;
    without.erase(u);
    if (std::optional<std::vector<GpuRef>> gpus = placeIgnoring(without)) chosen = takenFrom(*gpus, without);
  }
  // A whole lease taken may make a shrink needless (its job would be restarted for nothing): each
  // shrink's GPUs are spared in turn, the last taken first, where the request still fits.
  std::vector<size_t> shrinkOrder;
  for (size_t u : chosen)
    if (!cands[u].gpus.empty()) shrinkOrder.push_back(u);
  if (shrinkOrder.size() < chosen.size())
    for (auto u = shrinkOrder.rbegin(); u != shrinkOrder.rend(); ++u) {
      if (!chosen.count(*u)) continue;
      Chosen without = chosen;
      without.erase(*u);
      if (std::optional<std::vector<GpuRef>> gpus = placeIgnoring(without))
        chosen = takenFrom(*gpus, without);
    }
  const std::string request = std::to_string(r.gpus) + (r.gpus == 1 ? " GPU" : " GPUs");
  const std::string forWhom = "for ticket " + std::to_string(entry.ticket) + " of " + r.owner;
  const std::string byPriority =
      "preempted " + forWhom + " (priority " + std::to_string(r.priority) + ", " + request + ")";
  const std::string byQuota =
      mine == nullptr ? ""
                      : "preempted " + forWhom + " (" + request + ", within the guarantee of " +
                            std::to_string(mine->guaranteed) + " GPUs of " + toString(mine->kind) +
                            (mine->kind == Quota::Kind::kDefault ? "" : " " + mine->name) +
                            "): these GPUs were borrowed beyond its owner's guarantee";
  // Whole leases first: a lease preempted whole gives nothing back by a shrink as well.
  std::set<const Lease*> whole;
  std::map<const Lease*, std::vector<GpuRef>> shrinks;
  for (size_t u : chosen)
    if (cands[u].gpus.empty()) whole.insert(cands[u].lease);
  for (size_t u : chosen)
    if (!cands[u].gpus.empty() && !whole.count(cands[u].lease))
      for (const GpuRef& g : cands[u].gpus) shrinks[cands[u].lease].push_back(g);
  for (const Lease* victim : whole) {
    Lease& v = leases_.at(victim->id);
    const std::string& why = reclaimed.count(victim) ? byQuota : byPriority;
    v.preempt_at = addSaturating(now, preempt_.grace);
    v.preempt_reason = why;
    v.preempted_for = entry.ticket;
    dirty_.leases.insert(v.id);
    lease_events_.push_back({LeaseEvent::Kind::kPreempted, v, why});
    ++leases_preempted_;
    timeline.endEarly(v, leaseEnd(v, preempt_));
  }
  for (auto& [victim, gpus] : shrinks) {
    Lease& v = leases_.at(victim->id);
    poolOrder(gpus);
    const std::string why =
        "shrunk from " + std::to_string(v.gpus.size()) + " to " +
        std::to_string(v.gpus.size() - gpus.size()) + " GPUs " + forWhom + " (" +
        (reclaimable(victim) ? "within its owner's guarantee" : "priority " + std::to_string(r.priority)) +
        ", " + request + ")";
    v.shrink_gpus = std::move(gpus);
    v.shrink_at = addSaturating(now, preempt_.grace);
    v.shrink_reason = why;
    v.shrunk_for = entry.ticket;
    dirty_.leases.insert(v.id);
    lease_events_.push_back({LeaseEvent::Kind::kShrinking, v, why});
    timeline.endEarly(v, std::min(leaseEnd(v, preempt_), shrinkEnd(v, preempt_)), &v.shrink_gpus);
  }
  return !chosen.empty();
}

struct PoolState::PassPlan {
  // Until some request has to wait, nothing is promised: GPUs free now are simply those no lease
  // holds, and the timeline of lease ends is not needed (the common case, and the fast one).
  std::optional<Timeline> timeline;
  // Preemption, once some request has to wait: the leases that may be victims (the smallest
  // first, then the youngest), the elastic ones, and the requests whose victims are still ending.
  std::vector<const Lease*> victims, elastic;
  std::set<int64_t> awaitingVictims;
  std::vector<signed char> plainNodeOk;  // per slot, for requests without node constraints
  QuotaBook book;                        // kept up to date as the pass grants
  // Kept for an enqueue (keptPlanFor): when the pass ran, the first end of a lease after it (the
  // timeline frees its GPUs then, a tick drops it later), the lowest priority and the latest
  // enqueue time of the requests it planned, and plan_epoch_ as it left it.
  TimePoint at{}, valid_until = kNever, latest_enqueued{};
  int lowest_priority = 0;
  uint64_t epoch = 0;
};

PoolState::KeptPlan::KeptPlan() = default;
PoolState::KeptPlan::~KeptPlan() = default;
PoolState::KeptPlan::KeptPlan(const KeptPlan&) {}
PoolState::KeptPlan& PoolState::KeptPlan::operator=(const KeptPlan&) {
  plan.reset();
  return *this;
}
PoolState::KeptPlan::KeptPlan(KeptPlan&&) noexcept {}
PoolState::KeptPlan& PoolState::KeptPlan::operator=(KeptPlan&&) noexcept {
  plan.reset();
  return *this;
}

void PoolState::schedule(TimePoint now) {
  ++passes_;
  replan_ = false;
  last_pass_ = now;
  kept_plan_.plan.reset();
  std::vector<const QueueEntry*> order = waitingInOrder();
  planned_.clear();
  auto plan = std::make_unique<PassPlan>();
  plan->book = quotaBook();
  std::optional<int> waiting;               // the highest priority of a request left waiting that may start
  std::vector<std::string> grantedElastic;  // granted their minimum in this pass
  scheduleQueue(order, *plan, waiting, grantedElastic, now);
  plan->epoch = plan_epoch_;  // what the growth below changes, the plan does not know
  // As large as the free GPUs let them, unless a request of equal or higher priority still waits
  // (behind them in the queue too): part of the grant, not a change of size.
  QuotaBook& book = plan->book;
  for (const std::string& id : grantedElastic)
    if (auto l = leases_.find(id); l != leases_.end() && !(waiting && *waiting >= l->second.priority))
      growNow(l->second, book, now, false);
  growElastic(now, waiting, book);
  if (!plan->timeline || plan->epoch != plan_epoch_) return;
  plan->at = now;
  plan->lowest_priority = order.back()->request.priority;  // `order` is by priority, highest first
  for (const QueueEntry* e : order) plan->latest_enqueued = std::max(plan->latest_enqueued, e->enqueued);
  for (const auto& [id, lease] : leases_) {
    plan->valid_until = std::min(plan->valid_until, leaseEnd(lease, preempt_));
    if (lease.shrink_at) plan->valid_until = std::min(plan->valid_until, shrinkEnd(lease, preempt_));
  }
  kept_plan_.plan = std::move(plan);
}

PoolState::PassPlan* PoolState::keptPlanFor(const LeaseRequest& request, TimePoint now) {
  PassPlan* plan = kept_plan_.plan.get();
  // A request that sorts behind every waiting one (a priority no higher than theirs, enqueued
  // last) changes no plan ahead of it. An elastic one grows once granted: a pass's work.
  if (plan == nullptr || replan_ || slow_scheduling_ || plan->epoch != plan_epoch_ || request.elastic())
    return nullptr;
  if (now < plan->at || now < plan->latest_enqueued || now >= plan->valid_until ||
      now - plan->at >= kReplanEvery)
    return nullptr;
  return request.priority <= plan->lowest_priority ? plan : nullptr;
}

void PoolState::scheduleQueue(const std::vector<const QueueEntry*>& order, PassPlan& pass,
                              std::optional<int>& waiting, std::vector<std::string>& grantedElastic,
                              TimePoint now) {
  if (order.empty()) return;

  // Conservative backfill: every waiting request, in queue order, gets the earliest start at
  // which it fits on GPUs that are free then and not promised to a request ahead of it. Running
  // leases hold their GPUs until their maximum end (forever without one); a request starts now
  // only when its start is now, so it never delays anyone ahead of it.
  const std::vector<Slot>& inOrder = slots();
  std::optional<Timeline>& timeline = pass.timeline;
  std::vector<const Lease*>& victims = pass.victims;
  std::vector<const Lease*>& elastic = pass.elastic;
  std::set<int64_t>& awaitingVictims = pass.awaitingVictims;
  std::vector<signed char>& plainNodeOk = pass.plainNodeOk;
  QuotaBook& book = pass.book;
  auto granted = [&](const Lease& lease) {
    if (const Quota* q = quotas_.of(lease.owner)) book.used[q] += static_cast<int>(lease.gpus.size());
  };
  auto failNow = [&](const QueueEntry& entry) {
    QueueEntry& e = queue_.at(entry.ticket);
    if (e.status == QueueEntry::Status::kWaiting) --waiting_count_;
    e.status = QueueEntry::Status::kFailed;
    e.reason = "the pool can no longer satisfy a request for " + unitsText(entry.request) +
               " (GPUs failed or nodes went down)";
    dirty_.queue.insert(e.ticket);
  };
  for (const QueueEntry* entry : order) {
    const LeaseRequest& r = entry->request;
    if (!quotas_.empty() && !overLimit(r, book).empty()) continue;  // held back by its quota's limit
    if (r.shared()) {
      // MPS shares start now or wait: on GPUs free until the share's end (in the plan, where a
      // request waits: promised GPUs are not free), or beside shares that last as long.
      const TimePoint end = r.max_duration ? addSaturating(now, *r.max_duration) : kNever;
      auto freeGpu = [&](size_t s, size_t i) {
        return timeline ? timeline->freeOn(s, now, end)(i) : inOrder[s].held->unheld(i);
      };
      if (std::optional<std::vector<GpuRef>> gpus =
              place(shareViews(r, freeGpu, false, timeline ? std::optional(end) : std::nullopt), r)) {
        Lease lease = grantQueued(*entry, *gpus, now);
        granted(lease);
        const Lease& held = leases_.at(lease.id);
        if (timeline) timeline->hold(held.gpus, now, leaseEnd(held, preempt_), &held);
      } else if (!everFits(r)) {
        failNow(*entry);
      } else {
        waiting = std::max(waiting.value_or(r.priority), r.priority);
      }
      continue;
    }
    if (!timeline) {
      if (std::optional<std::vector<GpuRef>> gpus =
              place(nodeViews(inOrder, r, unheld<Slot>, false, &slot_cache_.unheld), r)) {
        Lease lease = grantQueued(*entry, *gpus, now);
        granted(lease);
        if (r.elastic()) grantedElastic.push_back(lease.id);
        continue;
      }
      timeline.emplace(inOrder, slot_cache_.index, leases_, preempt_, now);
      victims = victimCandidates(now, book);
      for (const auto& [id, lease] : leases_) {
        if (lease.preempt_at) awaitingVictims.insert(lease.preempted_for);
        if (lease.shrink_at) awaitingVictims.insert(lease.shrunk_for);
        if (lease.elastic) elastic.push_back(&lease);
      }
      // What they hold beyond their minimum is taken from the lowest priority first, then the
      // youngest.
      std::sort(elastic.begin(), elastic.end(), [](const Lease* a, const Lease* b) {
        if (a->priority != b->priority) return a->priority < b->priority;
        if (a->created != b->created) return a->created > b->created;
        return a->id < b->id;
      });
    }
    // The earliest start at which it fits, and where.
    // Requests without a maximum duration: the GPUs free from t on are those the timeline's index
    // lists up to t, so that neither the bound nor a placement walks the pool.
    // Per slot: -1 unknown, 0 no, 1 the request may use the node. A request without a fabric or
    // labels shares the pass's answers (most requests: a node's state is all that decides).
    std::vector<signed char> ownNodeOk;
    std::vector<signed char>& nodeOk = !r.fabric && r.labels.empty() ? plainNodeOk : ownNodeOk;
    auto nodeUsable = [&](size_t s) {
      if (nodeOk.empty()) nodeOk.assign(inOrder.size(), -1);
      if (nodeOk[s] < 0) nodeOk[s] = nodeMatches(*inOrder[s].node, r) ? 1 : 0;
      return nodeOk[s] == 1;
    };
    auto usable = [&](size_t s, size_t i) {
      const PoolNode& node = *inOrder[s].node;
      return nodeUsable(s) && node.placeable(i) && unitMatches(node, i, r);
    };
    auto earliestForGood = [&]() -> std::optional<std::pair<TimePoint, std::vector<GpuRef>>> {
      std::optional<TimePoint> bound;
      int found = 0;
      timeline->freeForGoodBy(kNever - seconds(1), [&](size_t s, size_t i, TimePoint end) {
        if (usable(s, i) && ++found == r.gpus) bound = std::max(end, now);
        return !bound;
      });
      std::optional<std::pair<TimePoint, std::vector<GpuRef>>> fit;
      timeline->eachStart(now, bound.value_or(kNever), [&](TimePoint t) {
        std::optional<std::vector<GpuRef>> gpus;
        if (t == kNever) {
          auto freeThen = [&](size_t slot, const Slot&) { return timeline->freeOn(slot, t, kNever); };
          gpus = place(nodeViews(inOrder, r, freeThen), r);
        } else {
          std::vector<std::pair<size_t, size_t>> free;
          timeline->freeForGoodBy(t, [&](size_t s, size_t i, TimePoint) {
            if (usable(s, i)) free.emplace_back(s, i);
            return true;
          });
          std::sort(free.begin(), free.end());
          std::vector<NodeView> views;
          for (const auto& [s, i] : free) {
            if (views.empty() || views.back().node != inOrder[s].node)
              views.push_back({inOrder[s].node, {}, false});
            views.back().usable.push_back(i);
          }
          for (NodeView& v : views) v.whole = !r.mig() && v.usable.size() == v.node->gpuCount();
          gpus = place(views, r);
        }
        if (gpus) fit = std::pair{t, std::move(*gpus)};
        return fit.has_value();
      });
      return fit;
    };
    auto earliest = [&]() -> std::optional<std::pair<TimePoint, std::vector<GpuRef>>> {
      if (!r.max_duration && !slow_scheduling_) return earliestForGood();
      // No start can come before the r.gpus-th earliest time a GPU that matches is free for the
      // request's length: start times before it are not tried (each try is a placement over the
      // pool, and a full pool has a start time for every lease end).
      // Each matching GPU with the earliest time it is free for the request's length: a GPU free
      // from t on for it has that time at or before t, so a placement at t looks at those only
      // (on a full pool a few GPUs, not the pool).
      struct FreeFrom {
        TimePoint at;
        size_t slot, gpu;
      };
      std::vector<FreeFrom> freeFrom;
      for (size_t s = 0; s < inOrder.size(); ++s) {
        if (!nodeUsable(s)) continue;
        const PoolNode& node = *inOrder[s].node;
        for (size_t i = 0; i < node.unitCount(); ++i)
          if (node.placeable(i) && unitMatches(node, i, r))
            freeFrom.push_back({timeline->earliestFree(s, i, now, r.max_duration), s, i});
      }
      if (freeFrom.size() < static_cast<size_t>(r.gpus)) return std::nullopt;
      auto nth = freeFrom.begin() + (r.gpus - 1);
      std::nth_element(freeFrom.begin(), nth, freeFrom.end(),
                       [](const FreeFrom& a, const FreeFrom& b) { return a.at < b.at; });
      const TimePoint bound = nth->at;
      auto seen = freeFrom.begin();  // [begin, seen): the GPUs free for the length by the last t tried
      std::optional<std::pair<TimePoint, std::vector<GpuRef>>> fit;
      timeline->eachStart(now, bound, [&](TimePoint t) {
        TimePoint to = (t == kNever || !r.max_duration) ? kNever : addSaturating(t, *r.max_duration);
        seen = std::partition(seen, freeFrom.end(), [&](const FreeFrom& f) { return f.at <= t; });
        std::vector<FreeFrom> maybe(freeFrom.begin(), seen);
        std::sort(maybe.begin(), maybe.end(), [](const FreeFrom& a, const FreeFrom& b) {
          return std::pair(a.slot, a.gpu) < std::pair(b.slot, b.gpu);
        });
        std::vector<NodeView> views;
        for (const FreeFrom& f : maybe) {
          if (!timeline->freeOn(f.slot, t, to)(f.gpu)) continue;
          const PoolNode* node = inOrder[f.slot].node;
          if (views.empty() || views.back().node != node) views.push_back({node, {}, false});
          views.back().usable.push_back(f.gpu);
        }
        for (NodeView& v : views) v.whole = !r.mig() && v.usable.size() == v.node->gpuCount();
        if (std::optional<std::vector<GpuRef>> gpus = place(views, r)) fit = std::pair{t, std::move(*gpus)};
        return fit.has_value();
      });
      return fit;
    };
    auto plan = earliest();
    // Preempting is worth it only where the request would otherwise start later than the victims'
    // notice and kill take.
    const TimePoint viaPreemption = addSaturating(now, preempt_.grace + preempt_.kill_margin);
    if ((!plan || plan->first > viaPreemption) && !awaitingVictims.count(entry->ticket) &&
        preemptFor(*entry, *timeline, victims, elastic, book, now))
      plan = earliest();
    if (plan) {
      auto& [t, gpus] = *plan;
      if (t == now) {
        Lease lease = grantQueued(*entry, gpus, now);
        granted(lease);
        const Lease& held = leases_.at(lease.id);
        timeline->hold(gpus, now, leaseEnd(held, preempt_), &held);
      } else {
        planned_[entry->ticket] = t;
        // A request that can start only once leases without an end have ended ("never", as far
        // as the plan can tell) may start at any moment they end: its GPUs are promised from now
        // on, or anything placed on them meanwhile could delay it without bound.
        TimePoint to = (t == kNever || !r.max_duration) ? kNever : addSaturating(t, *r.max_duration);
        timeline->hold(gpus, t == kNever ? now : t, to, nullptr);
      }
    }
    const bool placedAny = plan.has_value();
    if (!placedAny && !everFits(r)) failNow(*entry);
    if (queue_.at(entry->ticket).status == QueueEntry::Status::kWaiting)
      waiting = std::max(waiting.value_or(r.priority), r.priority);
  }
}

SubmitResult PoolState::submit(LeaseRequest request, TimePoint now, bool queue) {
  validateRequest(request);
  if (const Quota* q = quotas_.of(request.owner); q && q->limit && request.gpus > *q->limit)
    throw PoolError(PoolFailure::kNeverFits, ErrorCode::kUnsupported,
                    "a request for " + std::to_string(request.gpus) + " GPUs can never be satisfied: " +
                        (q->kind == Quota::Kind::kGroup ? "group " + q->name + " of " + request.owner
                                                        : "owner " + request.owner) +
                        " may hold at most " + std::to_string(*q->limit) +
                        " GPUs (its quota's limit); ask for fewer, or ask an administrator to raise it");
  QueueEntry entry;
  entry.ticket = next_ticket_++;
  entry.request = request;
  entry.enqueued = now;
  entry.heartbeat = now;
  const int64_t ticket = entry.ticket;
  enqueue(std::move(entry));
  dirty_.counters = true;
  bool last = false;  // planned behind every waiting request, against the last pass's plan
  if (PassPlan* plan = keptPlanFor(request, now)) {
    const uint64_t preempted = leases_preempted_, resized = leases_resized_;
    std::optional<int> waiting;
    std::vector<std::string> grantedElastic;
    plan->plainNodeOk.clear();  // nodes may have changed state since
    scheduleQueue({&queue_.at(ticket)}, *plan, waiting, grantedElastic, now);
    if (queue_.at(ticket).status == QueueEntry::Status::kWaiting && preempted == leases_preempted_ &&
        resized == leases_resized_) {
      plan->latest_enqueued = now;
      plan->lowest_priority = std::min(plan->lowest_priority, request.priority);
      last = true;
    } else {
      kept_plan_.plan.reset();  // a grant or a preemption: lease ends the plan does not track
    }
  } else {
    schedule(now);
  }

  QueueEntry& e = queue_.at(ticket);
  if (e.status == QueueEntry::Status::kFailed) {
    dequeue(queue_.find(ticket));
    dirty_.queue.erase(ticket);
    size_t usable = 0;
    for (const NodeView& v : request.shared()
                                 ? shareViews(
                                       request, [](size_t, size_t) { return true; }, true, std::nullopt)
                                 : nodeViews(slots(), request, allFree<Slot>, true))
      usable += v.usable.size();
    std::string shape = shapeText(request);
    const int inMig = status().gpus_mig;
    if (request.shared())
      throw PoolError(PoolFailure::kNeverFits, ErrorCode::kUnsupported,
                      "a request for " + unitsText(request) + shape +
                          " can never be satisfied: the pool has " + std::to_string(usable) +
                          " GPUs that could take such a share (not in MIG mode" +
                          (request.share_memory_bytes > 0 ? ", with that much memory" : "") +
                          ", one share of the job per GPU); ask for fewer ranks or a smaller share");
    if (request.mig())
      throw PoolError(PoolFailure::kNeverFits, ErrorCode::kUnsupported,
                      "a request for " + unitsText(request) + shape +
                          " can never be satisfied: the pool has " + std::to_string(usable) +
                          " usable MIG instances that match it (" +
                          std::to_string(status().mig_free + status().mig_leased) +
                          " MIG instances in all; `poolctl nodes` lists them with their profiles)" +
                          "; ask for another profile, PROFILE+ for larger ones, or fewer");
    throw PoolError(
        PoolFailure::kNeverFits, ErrorCode::kUnsupported,
        "a request for " + std::to_string(request.gpus) + " GPUs" + shape +
            " can never be satisfied: the pool has " + std::to_string(usable) + " usable GPUs that match it" +
            (inMig > 0 ? " (and " + std::to_string(inMig) + " in MIG mode, which no whole-GPU request takes)"
                       : "") +
            "; ask for fewer or relax the constraints");
  }
  SubmitResult result;
  if (e.status == QueueEntry::Status::kGranted) {
    result.lease = leases_.at(e.lease_id);
    dequeue(queue_.find(ticket));
    dirty_.queue.erase(ticket);
    return result;
  }
  if (last) {
    result.position = static_cast<int>(waiting_count_);
  } else {
    std::vector<const QueueEntry*> order = waitingInOrder();
    for (size_t i = 0; i < order.size(); ++i)
      if (order[i]->ticket == ticket) result.position = static_cast<int>(i + 1);
  }
  if (!queue) {
    dequeue(queue_.find(ticket));
    dirty_.queue.erase(ticket);
    replan_ = true;  // what the pass promised it no longer holds
    return result;
  }
  result.ticket = ticket;
  dirty_.queue.insert(ticket);
  return result;
}

PollResult PoolState::poll(int64_t ticket, TimePoint now) {
  auto it = queue_.find(ticket);
  if (it == queue_.end())
    throw PoolError(PoolFailure::kGone, ErrorCode::kNotFound,
                    "queue ticket " + std::to_string(ticket) + " is unknown (withdrawn, or dropped after " +
                        "its client went quiet); submit the request again");
  QueueEntry& e = it->second;
  PollResult r;
  r.status = e.status;
  if (e.status == QueueEntry::Status::kWaiting) {
    if (now - e.heartbeat >= seconds(1)) dirty_.queue.insert(ticket);
    e.heartbeat = now;
    std::vector<const QueueEntry*> order = waitingInOrder();
    for (size_t i = 0; i < order.size(); ++i)
      if (order[i]->ticket == ticket) r.position = static_cast<int>(i + 1);
    r.wait_reason = waitReason(ticket);
    if (std::optional<TimePoint> planned = plannedStart(ticket); planned && *planned != kNever)
      r.planned_start = planned;
    return r;
  }
  if (e.status == QueueEntry::Status::kGranted) {
    auto l = leases_.find(e.lease_id);
    if (l == leases_.end()) {
      r.status = QueueEntry::Status::kFailed;
      r.reason =
          "the lease granted to queue ticket " + std::to_string(ticket) + " expired before it was collected";
    } else {
      r.lease = l->second;
    }
  } else {
    r.reason = e.reason;
  }
  dequeue(it);
  dirty_.queue.insert(ticket);
  return r;
}

void PoolState::cancel(int64_t ticket, TimePoint now) {
  auto it = queue_.find(ticket);
  if (it == queue_.end()) return;
  if (it->second.status == QueueEntry::Status::kGranted)
    dropLease(it->second.lease_id, LeaseEvent::Kind::kReleased, "its queued request was withdrawn");
  dequeue(it);
  dirty_.queue.insert(ticket);
  schedule(now);
}

Lease PoolState::renew(const std::string& id, const std::string& owner, bool admin, TimePoint now) {
  auto it = leases_.find(id);
  if (it == leases_.end()) {
    if (auto r = ended_by_pool_.find(id); r != ended_by_pool_.end())
      throw PoolError(PoolFailure::kGone, ErrorCode::kNotFound,
                      "lease " + id + " was " + r->second + "; acquire a new one");
    throw gone(id);
  }
  Lease& lease = it->second;
  if (lease.owner != owner && !admin)
    throw PoolError(PoolFailure::kForbidden, ErrorCode::kBadInput,
                    "owner " + owner + " may not renew lease " + id + " of " + lease.owner +
                        " (only its owner or an administrator may)");
  TimePoint end = leaseEnd(lease, preempt_);
  if (now >= lease.expires || now >= end) {
    dropLease(id, LeaseEvent::Kind::kExpired);
    schedule(now);
    throw gone(id);
  }
  lease.expires = std::min(addSaturating(now, lease.ttl), end);
  dirty_.leases.insert(id);
  return withLiveView(lease, now);
}

Lease PoolState::shrink(const std::string& id, const std::string& owner, bool admin, TimePoint now) {
  if (auto it = leases_.find(id); it != leases_.end() && it->second.owner != owner && !admin)
    throw PoolError(PoolFailure::kForbidden, ErrorCode::kBadInput,
                    "owner " + owner + " may not shrink lease " + id + " of " + it->second.owner +
                        " (only its owner or an administrator may)");
  Lease lease = renew(id, owner, admin, now);  // the same checks, and a holder that shrinks is alive
  Lease& held = leases_.at(id);
  if (!held.shrink_at) return lease;
  applyShrink(held, now, held.shrink_reason + ", given back by its holder");
  schedule(now);
  return withLiveView(leases_.at(id), now);
}

bool PoolState::release(const std::string& id, const std::string& owner, bool admin, TimePoint now) {
  auto it = leases_.find(id);
  if (it == leases_.end()) return false;
  if (it->second.owner != owner && !admin)
    throw PoolError(PoolFailure::kForbidden, ErrorCode::kBadInput,
                    "owner " + owner + " may not release lease " + id + " of " + it->second.owner +
                        " (only its owner or an administrator may)");
  dropLease(id);
  schedule(now);
  return true;
}

void PoolState::tick(TimePoint now, std::chrono::seconds stale_after) {
  view_time_ = std::max(view_time_, now);
  updateLiveness(now);
  reclaimIdle(now);
  forgetRequests(now);
  std::vector<std::string> expired, preempted;
  for (auto& [id, lease] : leases_) {
    if (lease.shrink_at && shrinkEnd(lease, preempt_) <= now && lease.expires > now)
      applyShrink(lease, now,
                  lease.shrink_reason + ", taken back " + std::to_string(preempt_.kill_margin.count()) +
                      " s after the deadline (its holder had not given them back)");
    if (lease.preempt_at && leaseEnd(lease, preempt_) <= now)
      preempted.push_back(id);
    else if (lease.expires <= now)
      expired.push_back(id);
  }
  for (const std::string& id : expired) dropLease(id, LeaseEvent::Kind::kExpired);
  for (const std::string& id : preempted) {
    std::string why = leases_.at(id).preempt_reason + ", and its holder had not released it " +
                      std::to_string(preempt_.kill_margin.count()) + " s after the deadline";
    dropLease(id, LeaseEvent::Kind::kExpired, why);
    endedByPool(id, std::move(why));
  }
  std::vector<int64_t> stale;
  for (const auto& [ticket, e] : queue_)
    if (now - e.heartbeat > stale_after) stale.push_back(ticket);
  for (int64_t ticket : stale) {
    if (queue_.at(ticket).status == QueueEntry::Status::kGranted)
      dropLease(queue_.at(ticket).lease_id, LeaseEvent::Kind::kExpired, "its queued client stopped polling");
    dequeue(queue_.find(ticket));
    dirty_.queue.insert(ticket);
    replan_ = true;
  }
  if (replan_ || now - last_pass_ >= kReplanEvery || now < last_pass_) schedule(now);
}

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
    info.switch_name = node->switch_name;
    info.rail_group = node->rail_group;
    info.fabric = topo::toString(topo::nodeFabrics(*node->topology, node->fabric).front());
    info.labels = node->labels;
    info.state = node->state;
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

void PoolState::loadNode(PoolNode node) {
  next_order_ = std::max(next_order_, node.order + 1);
  std::string name = node.name;
  if (node.topology) {
    node.topology_hash = topologyHash(*node.topology);
    node.setTopology(node.topology);
  }
  node.live = NodeLive{};
  nodes_[name] = std::move(node);
  occupancy_[name].holder.resize(nodes_[name].unitCount());
  slotsChanged();
}

void PoolState::loadLease(Lease lease) {
  for (GpuRef& g : lease.gpus) {
    auto n = nodes_.find(g.node);
    if (n == nodes_.end() || g.index >= n->second.unitCount()) continue;
    if (g.share) {
      if (g.index >= n->second.gpuCount() || !occupancy(g.node).holder[g.index].empty())
        throw Error(ErrorCode::kInternal, "stored lease " + lease.id + " holds a share of " + g.node + ":" +
                                              std::to_string(g.index) + ", which is no GPU or is held whole");
      addSharer(g.node, g.index, lease.id);
      continue;
    }
    if (const topo::MigInstance* m = n->second.migInstance(g.index)) g.mig = m->uuid;
    std::string& h = occupancy(g.node).holder[g.index];
    if (!h.empty())
      throw Error(ErrorCode::kInternal, "stored leases " + h + " and " + lease.id + " both hold " + g.node +
                                            ":" + std::to_string(g.index));
    h = lease.id;
    heldChanged(g.node, true);
  }
  std::string id = lease.id;
  if (lease.elastic)
    elastic_leases_.insert(id);
  else
    elastic_leases_.erase(id);
  leases_[id] = std::move(lease);
}

void PoolState::loadQueueEntry(QueueEntry entry) {
  if (auto known = queue_.find(entry.ticket); known != queue_.end()) dequeue(known);
  enqueue(std::move(entry));
}

void PoolState::enqueue(QueueEntry entry) {
  ++queued_by_owner_[entry.request.owner];
  if (entry.status == QueueEntry::Status::kWaiting) ++waiting_count_;
  const int64_t ticket = entry.ticket;
  queue_[ticket] = std::move(entry);
}

void PoolState::dequeue(std::map<int64_t, QueueEntry>::iterator it) {
  auto owner = queued_by_owner_.find(it->second.request.owner);
  if (owner != queued_by_owner_.end() && --owner->second == 0) queued_by_owner_.erase(owner);
  if (it->second.status == QueueEntry::Status::kWaiting) --waiting_count_;
  queue_.erase(it);
}

size_t PoolState::queuedBy(const std::string& owner) const {
  auto it = queued_by_owner_.find(owner);
  return it == queued_by_owner_.end() ? 0 : it->second;
}

void PoolState::loadCounters(uint64_t leases_granted, int64_t next_ticket) {
  leases_granted_ = leases_granted;
  next_ticket_ = next_ticket;
  for (const auto& [t, e] : queue_) next_ticket_ = std::max(next_ticket_, t + 1);
}

const RememberedRequest* PoolState::rememberedRequest(const std::string& id) const {
  auto it = requests_.find(id);
  return it == requests_.end() ? nullptr : &it->second;
}

void PoolState::rememberRequest(const std::string& id, RememberedRequest request) {
  if (auto old = requests_.find(id); old != requests_.end()) requests_by_time_.erase({old->second.at, id});
  requests_by_time_.insert({request.at, id});
  requests_[id] = std::move(request);
  dirty_.requests.insert(id);
  forgetRequests(requests_[id].at);
}

void PoolState::loadRequest(const std::string& id, RememberedRequest request) {
  if (auto old = requests_.find(id); old != requests_.end()) requests_by_time_.erase({old->second.at, id});
  requests_by_time_.insert({request.at, id});
  requests_[id] = std::move(request);
}

void PoolState::forgetRequests(TimePoint now) {
  while (!requests_by_time_.empty() && (requests_by_time_.size() > kMaxRememberedRequests ||
                                        requests_by_time_.begin()->first + kRequestMemory < now)) {
    const std::string id = requests_by_time_.begin()->second;
    requests_by_time_.erase(requests_by_time_.begin());
    requests_.erase(id);
    dirty_.requests.insert(id);
  }
}

Dirty PoolState::takeDirty() {
  Dirty d = std::move(dirty_);
  dirty_ = Dirty{};
  return d;
}

void PoolState::clear() {
  replan_ = true;
  nodes_.clear();
  occupancy_.clear();
  slotsChanged();
  leases_.clear();
  elastic_leases_.clear();
  queue_.clear();
  queued_by_owner_.clear();
  waiting_count_ = 0;
  kept_plan_.plan.reset();
  requests_.clear();
  requests_by_time_.clear();
  leases_granted_ = 0;
  next_ticket_ = 1;
  next_order_ = 0;
  dirty_ = Dirty{};
  last_busy_.clear();
  reclaim_at_.clear();
  ended_by_pool_.clear();
  lease_events_.clear();
  node_events_.clear();
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
  const bool constrained = !r.gpu_model.empty() || r.min_memory_bytes > 0 || r.fabric || !r.labels.empty();
  std::string text = "needs " + std::to_string(r.gpus) + (r.gpus == 1 ? " GPU" : " GPUs") + shapeText(r) +
                     ", " + std::to_string(free) + " free" + (constrained ? " that match" : "");
  // A request its quota's limit holds back is not about to start, whatever is free.
  const std::string limit = quotas_.empty() ? std::string() : overLimit(r, quotaBook());
  if (free >= r.gpus) {
    if (!place(nodeViews(slots(), r, unheld<Slot>, false, &slot_cache_.unheld), r))
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

std::vector<double> PoolState::takeWaitSeconds() {
  std::vector<double> out;
  out.swap(wait_seconds_);
  return out;
}

std::vector<LeaseEvent> PoolState::takeLeaseEvents() {
  std::vector<LeaseEvent> out;
  out.swap(lease_events_);
  return out;
}

}  // namespace poolrun::pool
