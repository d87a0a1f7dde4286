#pragma once

// The pool's policies that do not depend on how a request arrives, written once for poold's routes
// and the embedded pools: who may act for whom, what resuming a node clears, the view of a node,
// and acquires made idempotent by a client request id. A PoolService acts for one caller on a
// PoolState that whoever calls it holds (poold's lock, an embedded pool's transaction); what it
// changes, PoolState marks dirty for that holder's store to persist.

#include <optional>
#include <string>

#include "poolrun/pool/state.hpp"
#include "poolrun/pool/types.hpp"
#include "poolrun/topo/cluster.hpp"

namespace poolrun::pool {

class PoolService {
 public:
  explicit PoolService(Caller who) : who_(std::move(who)) {}
  const Caller& caller() const { return who_; }

  // --- who may act for whom
  // The owner a lease request is for: the caller, unless an administrator names another.
  std::string ownerOf(const std::string& asked) const;
  // Throws PoolError kForbidden ("owner X (role user) may not WHAT; an administrator may") unless
  // the caller is an administrator.
  void requireAdmin(const std::string& what) const;
  // Throws PoolError kForbidden ("owner X may not WHAT of Y") where queue ticket `ticket` is another
  // owner's and the caller is no administrator. An unknown ticket passes (PoolState answers it).
  void requireTicketOwner(const PoolState& s, int64_t ticket, const std::string& what) const;

  // --- a lease, as its owner (or an administrator): PoolState::renew, shrink, release
  Lease renew(PoolState& s, const std::string& id, TimePoint now) const;
  Lease shrink(PoolState& s, const std::string& id, TimePoint now) const;
  bool release(PoolState& s, const std::string& id, TimePoint now) const;

  // --- acquires made idempotent by a client request id (RememberedRequest)
  // The key under which an acquire of `owner` with the client's id `clientId` is remembered.
  static std::string requestKey(const std::string& owner, const std::string& clientId);
  // A retry (its first reply lost, poold restarted, another replica leads now): the first answer as
  // the state has it now. nullopt where `key` is empty or unknown, or its lease or ticket has ended
  // since (then the request is answered as a new one).
  static std::optional<SubmitResult> retried(const PoolState& s, const std::string& key);
  // Remembers what an acquire under `key` got (nothing where it got neither a lease nor a ticket).
  static void remember(PoolState& s, const std::string& key, const SubmitResult& got, TimePoint now);

  // --- nodes
  // Drains a node, or resumes it: resuming also clears its GPUs' failures (an administrator has
  // looked). Throws as PoolState::setNodeState.
  static void setNodeState(PoolState& s, const std::string& node, NodeState state);
  // The node's registration as a ClusterNode. Throws Error kNotFound ("no node 'X' in WHERE")
  // where the pool has none of that name.
  static topo::ClusterNode clusterNode(const PoolState& s, const std::string& name, const std::string& where);
  static topo::ClusterNode clusterNode(const PoolNode& n);

 private:
  Caller who_;
};

}  // namespace poolrun::pool
