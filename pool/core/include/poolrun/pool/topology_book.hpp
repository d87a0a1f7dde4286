// Node topologies shared by content: nodes that registered the same hardware hold one copy of it
// (12,500 nodes of one kind hold one topology, and the store writes one document for them).
#pragma once

#include <memory>
#include <string>
#include <unordered_map>

#include "poolrun/topo/topology.hpp"

namespace poolrun::pool {

class TopologyBook {
 public:
  struct Shared {
    std::shared_ptr<const topo::NodeTopology> topology;
    std::string hash;  // topologyHash of it
  };
  // The copy held already where one has the same content (compared whole, not by hash alone),
  // else `topology`, kept for the next. Either way with its topologyHash. `doc`: its topologyDoc
  // where the caller has it (empty: worked out here, unless the topology is shared already).
  Shared share(std::shared_ptr<const topo::NodeTopology> topology, std::string doc = {});
  // Topologies remembered: those nodes hold, and the gone ones of late (at most twice as many as
  // were held at the last clean-up, and 17).
  size_t size() const { return by_hash_.size(); }

 private:
  struct Entry {
    std::weak_ptr<const topo::NodeTopology> topology;
    const topo::NodeTopology* address = nullptr;  // its key in hash_of_
    std::string doc;                              // topologyDoc of it
  };
  void forgetGone();
  std::unordered_map<std::string, Entry> by_hash_;
  // The hash of a topology shared already, by address (checked against by_hash_: an address is
  // reused once its topology is gone), so that a node loaded with a shared copy is not serialized.
  std::unordered_map<const topo::NodeTopology*, std::string> hash_of_;
  size_t kept_after_last_forget_ = 0;
};

}  // namespace poolrun::pool
