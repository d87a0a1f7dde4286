// The pool's nodes as placement sees them (NodeView): the GPUs of each that a request could take,
// free now, in the scheduler's plan, or ever. Shared by the lease rules, the scheduler and the views.
#pragma once

#include <optional>
#include <vector>

#include "poolrun/pool/limits.hpp"
#include "poolrun/pool/placement.hpp"
#include "poolrun/pool/state.hpp"

namespace poolrun::pool {

// Whether `r` may take unit i of the node at slot s of `slots` at all (its node, its state, its
// kind), whenever that would be. `nodeOk` keeps each node's answer: per slot -1 unknown, 0 no, 1 yes.
template <class Slots>
bool usableUnit(const Slots& slots, std::vector<signed char>& nodeOk, const LeaseRequest& r, size_t s,
                size_t i) {
  const PoolNode& node = *slots[s].node;
  if (nodeOk.empty()) nodeOk.assign(slots.size(), -1);
  if (nodeOk[s] < 0) nodeOk[s] = nodeMatches(node, r) ? 1 : 0;
  return nodeOk[s] == 1 && i < node.unitCount() && node.placeable(i) && unitMatches(node, i, r);
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

}  // namespace poolrun::pool
