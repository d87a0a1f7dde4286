#include "poolrun/pool/topology_book.hpp"

#include <iterator>

#include "poolrun/common/hash.hpp"
#include "poolrun/pool/types.hpp"

namespace poolrun::pool {

TopologyBook::Shared TopologyBook::share(std::shared_ptr<const topo::NodeTopology> topology,
                                         std::string doc) {
  if (auto known = hash_of_.find(topology.get()); known != hash_of_.end())
    if (auto e = by_hash_.find(known->second); e != by_hash_.end() && e->second.topology.lock() == topology)
      return {std::move(topology), known->second};
  if (doc.empty()) doc = topologyDoc(*topology);
  std::string hash = common::fnv1aHex(doc);
  Entry& entry = by_hash_[hash];
  if (std::shared_ptr<const topo::NodeTopology> held = entry.topology.lock()) {
    if (entry.doc == doc) return {std::move(held), std::move(hash)};
    return {std::move(topology), std::move(hash)};  // another topology under the same hash: not shared
  }
  hash_of_.erase(entry.address);  // a gone topology's
  entry = {topology, topology.get(), std::move(doc)};
  hash_of_[topology.get()] = hash;
  if (by_hash_.size() > 2 * kept_after_last_forget_ + 16) forgetGone();
  return {std::move(topology), std::move(hash)};
}

// Entries of topologies no node holds any more, dropped once the book has doubled since the last
// time (each share stays constant time on the average).
void TopologyBook::forgetGone() {
  std::erase_if(by_hash_, [this](const auto& e) {
    if (!e.second.topology.expired()) return false;
    hash_of_.erase(e.second.address);
    return true;
  });
  kept_after_last_forget_ = by_hash_.size();
}

}  // namespace poolrun::pool
