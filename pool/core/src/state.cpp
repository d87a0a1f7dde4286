// PoolState's inventory: the nodes and their GPUs in pool order, who holds each GPU, the
// bookkeeping a copy or a load restores, and what it marks dirty. The rules live beside it:
// leases.cpp (grant, renew, release, expiry, the queue's entries), scheduler/ (the pass, the
// timeline, preemption, the quota book), views.cpp (status and the lists), elastic.cpp, live.cpp.

#include "poolrun/pool/state.hpp"

#include <algorithm>

#include "lease_times.hpp"
#include "node_views.hpp"
#include "poolrun/common/names.hpp"
#include "poolrun/common/regular_file.hpp"
#include "poolrun/pool/placement.hpp"
#include "scheduler/pass_plan.hpp"

namespace poolrun::pool {

void Dirty::merge(const Dirty& other) {
  nodes.insert(other.nodes.begin(), other.nodes.end());
  requests.insert(other.requests.begin(), other.requests.end());
  join_tokens.insert(other.join_tokens.begin(), other.join_tokens.end());
  credentials.insert(other.credentials.begin(), other.credentials.end());
  jobs.insert(other.jobs.begin(), other.jobs.end());
  usage.insert(other.usage.begin(), other.usage.end());
  reservations.insert(other.reservations.begin(), other.reservations.end());
  leases.insert(other.leases.begin(), other.leases.end());
  new_leases.insert(other.new_leases.begin(), other.new_leases.end());
  resized.insert(other.resized.begin(), other.resized.end());
  queue.insert(other.queue.begin(), other.queue.end());
  counters = counters || other.counters;
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

void PoolState::registerNode(const topo::ClusterNode& cn, bool endLostInstances, std::string topologyDoc) {
  checkDomain(cn);  // before anything changes
  if (cn.name.empty()) throw badInput("cannot register a node without a name");
  common::checkNodeName(cn.name, "cannot register node");  // the last guard, whatever the entry point
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
      dropLease(id, view_time_, LeaseEvent::Kind::kReleased, why);
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
  TopologyBook::Shared topology = topologies_.share(cn.topology, std::move(topologyDoc));
  node.setTopology(topology.topology);
  indexDomain(node, false);
  node.levels = cn.levels;
  indexDomain(node, true);
  node.fabric = cn.fabric;
  node.labels = cn.labels;
  node.topology_hash = std::move(topology.hash);
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
  // An administrator's drain or resume: the node is theirs to resume, whatever its agent says.
  it->second.drain_reason.clear();
  it->second.drained_by_agent = false;
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
  size_t indexed = 0;
  for (const auto& [node, names] : reserved_on_)
    for (const std::string& name : names) {
      auto r = reservations_.find(name);
      if (r == reservations_.end() || !r->second.holds(node))
        return "node " + node + " is indexed as kept by reservation " + name + ", which does not keep it";
      ++indexed;
    }
  size_t kept = 0;
  for (const auto& [name, r] : reservations_) kept += r.nodes.size();
  if (kept != indexed)
    return "the reservations keep " + std::to_string(kept) + " nodes, the index has " +
           std::to_string(indexed);
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

void PoolState::indexDomain(const PoolNode& node, bool add) {
  const std::string& domain = node.levels.nvlink_domain;
  if (domain.empty()) return;
  std::set<std::string>& members = domain_nodes_[domain];
  if (add) {
    members.insert(node.name);
  } else {
    members.erase(node.name);
    if (members.empty()) domain_nodes_.erase(domain);
  }
}

void PoolState::checkDomain(const topo::ClusterNode& cn) const {
  const std::string& domain = cn.levels.nvlink_domain;
  if (domain.empty()) return;
  size_t gpus = cn.topology ? cn.topology->gpus.size() : 0;
  if (auto d = domain_nodes_.find(domain); d != domain_nodes_.end())
    for (const std::string& member : d->second) {
      if (member == cn.name) continue;
      const PoolNode& other = nodes_.at(member);
      if (std::string problem = topo::domainConflict(cn.name, cn.levels, member, other.levels);
          !problem.empty())
        throw badInput("node " + cn.name + ": " + problem);
      gpus += other.gpuCount();
    }
  if (gpus > topo::kMaxNvlinkDomainGpus)
    throw badInput("node " + cn.name + ": nvlink_domain '" + common::printable(domain) + "' would join " +
                   std::to_string(gpus) + " GPUs; one NVLink domain joins at most " +
                   std::to_string(topo::kMaxNvlinkDomainGpus) +
                   " (an NVL72 rack: 72): check its --nvlink-domain");
}

std::optional<Spread> PoolState::strictLimit(const LeaseRequest& request) const {
  if (!request.topology_strict || request.shared()) return std::nullopt;
  std::optional<std::vector<GpuRef>> ideal = place(nodeViews(slots(), request, allFree<Slot>, true), request);
  if (!ideal) return std::nullopt;
  std::vector<const PoolNode*> nodes;
  for (const GpuRef& g : *ideal)
    if (nodes.empty() || nodes.back()->name != g.node) nodes.push_back(&nodes_.at(g.node));
  return spreadOf(nodes);
}

std::optional<std::vector<GpuRef>> PoolState::placeFor(std::span<const NodeView> views,
                                                       const LeaseRequest& request) const {
  const std::optional<Spread> limit = strictLimit(request);
  return place(views, request, limit ? &*limit : nullptr);
}

void PoolState::loadNode(PoolNode node) {
  next_order_ = std::max(next_order_, node.order + 1);
  std::string name = node.name;
  if (node.topology) {
    TopologyBook::Shared topology = topologies_.share(node.topology);
    node.topology_hash = std::move(topology.hash);
    node.setTopology(std::move(topology.topology));
  }
  node.live = NodeLive{};
  if (auto old = nodes_.find(name); old != nodes_.end()) indexDomain(old->second, false);
  nodes_[name] = std::move(node);
  indexDomain(nodes_[name], true);
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
  members_.clear();
  jobs_.clear();
  usage_ = UsageLedger{};
  usage_unchecked_ = false;
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
