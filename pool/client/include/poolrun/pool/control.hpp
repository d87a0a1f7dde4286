#pragma once

// What people and scripts see of a pool beyond leasing (poolctl): the inventory, the leases, the
// queue, and the administrator's commands. Every pool kind implements it.

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "poolrun/pool/client.hpp"
#include "poolrun/pool/quotas.hpp"
#include "poolrun/pool/types.hpp"

namespace poolrun::pool {

class PoolControl : public PoolClient {
 public:
  virtual PoolStatus status() = 0;
  virtual std::vector<NodeInfo> nodes() = 0;
  virtual std::vector<Lease> leases() = 0;
  virtual std::vector<QueueInfo> queue() = 0;
  virtual std::vector<QuotaUse> quotas() = 0;  // use against each quota (empty without quotas)
  // Administrator commands (PoolError kForbidden for a user).
  // Adds nodes, or updates the topology, switch and labels of known ones (keeping their state).
  virtual void registerNodes(const std::vector<topo::ClusterNode>& nodes) = 0;
  virtual void drain(const std::string& node) = 0;   // no new leases; existing ones run on
  virtual void resume(const std::string& node) = 0;  // back to up
  virtual void failGpu(const std::string& node, size_t index) = 0;
  // Asks for GPU `gpu` of `node` to be split into GPU instances of `profiles`, made by the node's
  // agent once no lease holds the GPU or its instances (PoolState::setMigLayout; docs/mig.md).
  virtual void setMigLayout(const std::string& node, size_t gpu,
                            const std::vector<std::string>& profiles) = 0;
  // The replicas and etcd's health; nullopt for a pool of one server (SQLite, the embedded pools).
  virtual std::optional<PoolReplicas> replicas() { return std::nullopt; }
};

}  // namespace poolrun::pool
