// validateRequest: the one place a request's numbers and names are judged (state.hpp).

#include "poolrun/pool/limits.hpp"
#include "poolrun/pool/state.hpp"
#include "poolrun/topo/names.hpp"

namespace poolrun::pool {

using std::chrono::seconds;

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

}  // namespace poolrun::pool
