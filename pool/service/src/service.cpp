#include "poolrun/pool/service.hpp"

namespace poolrun::pool {

std::string PoolService::ownerOf(const std::string& asked) const {
  return who_.admin && !asked.empty() ? asked : who_.owner;
}

void PoolService::requireAdmin(const std::string& what) const {
  if (!who_.admin)
    throw PoolError(PoolFailure::kForbidden, ErrorCode::kBadInput,
                    "owner " + who_.owner + " (role user) may not " + what + "; an administrator may");
}

void PoolService::requireTicketOwner(const PoolState& s, int64_t ticket, const std::string& what) const {
  auto q = s.queueMap().find(ticket);
  if (q != s.queueMap().end() && q->second.request.owner != who_.owner && !who_.admin)
    throw PoolError(PoolFailure::kForbidden, ErrorCode::kBadInput,
                    "owner " + who_.owner + " may not " + what + " of " + q->second.request.owner);
}

Lease PoolService::renew(PoolState& s, const std::string& id, TimePoint now) const {
  return s.renew(id, who_.owner, who_.admin, now);
}

Lease PoolService::shrink(PoolState& s, const std::string& id, TimePoint now) const {
  return s.shrink(id, who_.owner, who_.admin, now);
}

bool PoolService::release(PoolState& s, const std::string& id, TimePoint now) const {
  return s.release(id, who_.owner, who_.admin, now);
}

std::string PoolService::requestKey(const std::string& owner, const std::string& clientId) {
  return owner + "/" + clientId;
}

std::optional<SubmitResult> PoolService::retried(const PoolState& s, const std::string& key) {
  const RememberedRequest* seen = key.empty() ? nullptr : s.rememberedRequest(key);
  if (seen == nullptr) return std::nullopt;
  if (auto l = s.leaseMap().find(seen->lease); !seen->lease.empty() && l != s.leaseMap().end())
    return SubmitResult{l->second, 0, 0};
  if (seen->ticket > 0 && s.queueMap().count(seen->ticket)) {
    SubmitResult queued{std::nullopt, seen->ticket, 0};
    for (const QueueInfo& q : s.queueList())
      if (q.ticket == seen->ticket) queued.position = q.position;
    return queued;
  }
  return std::nullopt;
}

void PoolService::remember(PoolState& s, const std::string& key, const SubmitResult& got, TimePoint now) {
  if (!key.empty() && (got.lease || got.ticket > 0))
    s.rememberRequest(key, {got.lease ? got.lease->id : "", got.ticket, now});
}

void PoolService::setNodeState(PoolState& s, const std::string& node, NodeState state) {
  s.setNodeState(node, state);
  if (state == NodeState::kUp) s.clearGpuFailures(node);  // resume: an administrator has looked
}

topo::ClusterNode PoolService::clusterNode(const PoolState& s, const std::string& name,
                                           const std::string& where) {
  auto it = s.nodeMap().find(name);
  if (it == s.nodeMap().end())
    throw Error(ErrorCode::kNotFound, "no node '" + name + "' in " + where + " (see `poolctl nodes`)");
  return clusterNode(it->second);
}

topo::ClusterNode PoolService::clusterNode(const PoolNode& n) {
  topo::ClusterNode c;
  c.name = n.name;
  c.topology = n.topology;
  c.levels = n.levels;
  c.fabric = n.fabric;
  c.labels = n.labels;
  return c;
}

}  // namespace poolrun::pool
