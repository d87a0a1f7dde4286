#pragma once

// Gang placement: which GPUs a request gets out of those it may use, all or none.
// Rules, in order (docs/placement.md): inside one NVLink domain where one holds the request, else
// over the fewest domains (a node outside any counting as one); fewest nodes; under one block,
// leaf switch (or rail group) or spine, the lowest that takes no more domains and nodes than the
// pool at large; best fit (the tightest set of partly used nodes, so that whole nodes stay free
// for large requests); inside a node, GPUs that share a PCIe switch, else a NUMA node.

#include <optional>
#include <span>
#include <vector>

#include "poolrun/pool/state.hpp"
#include "poolrun/pool/types.hpp"

namespace poolrun::pool {

// A node as placement sees it: GPUs the request may use now (free, matching the constraints).
struct NodeView {
  const PoolNode* node = nullptr;
  std::vector<size_t> usable;  // unit indexes (PoolNode::unitCount), ascending
  bool whole = false;          // every GPU of the node is usable
  // An MPS share request: per usable GPU, the percentage of its SMs no share holds (100 for a GPU
  // without shares). The tightest are taken first, so that free GPUs stay free for whole leases.
  std::vector<int> room{};
};

// Whether the node itself matches the request (state up, fabric, labels). GPU-level constraints
// (model, memory) are gpuMatches().
// `anyState`: as if the node were up (whether the pool could ever use it, draining nodes count).
bool nodeMatches(const PoolNode& node, const LeaseRequest& request, bool anyState = false);
// A GPU in MIG mode, now or after its next reset, never matches: a whole-GPU request does not take
// it (its MIG instances are the units).
bool gpuMatches(const topo::Gpu& gpu, const LeaseRequest& request);
// Whether unit `unit` of `node` (a GPU, or a MIG instance: PoolNode::mig_units) matches the
// request: a whole GPU for a whole-GPU request (gpuMatches), a MIG instance of the profile (or a
// larger one, PROFILE+) for a MIG request, on a GPU whose MIG mode stays on.
bool unitMatches(const PoolNode& node, size_t unit, const LeaseRequest& request);
// MIG mode now, or after the GPU's next reset.
bool inMigMode(const topo::Gpu& gpu);
// The device memory an MPS share of `request` may pin on GPU `gpu` of `node`: the request's, or its
// percentage of the GPU's memory (PoolNode::memoryOf; 0, not limited, where that is unknown).
uint64_t shareMemory(const PoolNode& node, size_t gpu, const LeaseRequest& request);

// How far a placement spreads: its nodes, and the names at each level above them it crosses (a
// node with no name at a level counting as one of its own).
struct Spread {
  size_t nodes = 0, domains = 0, blocks = 0, leaves = 0, spines = 0;
  // No more of any level than `o` (--placement strict holds a placement to the best an empty pool gives).
  bool operator<=(const Spread& o) const {
    return domains <= o.domains && blocks <= o.blocks && leaves <= o.leaves && spines <= o.spines;
  }
};
Spread spreadOf(std::span<const PoolNode* const> nodes);  // each node once

// The GPUs for `request`, sorted by pool order of their nodes then index; nullopt when it does
// not fit, or (`atMost`) fits only spread further than that. For an MPS share request (LeaseRequest::shared),
// one share on each of `gpus` GPUs: on the fewest nodes as for GPUs, within a node the GPUs with the least
// room first (NodeView::room). Cost: O(nodes log nodes) plus a small enumeration for requests spanning <= 3
// nodes.
std::optional<std::vector<GpuRef>> place(std::span<const NodeView> nodes, const LeaseRequest& request,
                                         const Spread* atMost = nullptr);

}  // namespace poolrun::pool
