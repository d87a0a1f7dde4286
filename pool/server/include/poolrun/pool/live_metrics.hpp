#pragma once

// The live pool's part of poold's /metrics: per-GPU gauges from the agents' last heartbeats, the
// heartbeat age of every node with an agent, idle leases, XID and ECC counts. Prometheus text
// format; names follow its conventions (base units, _ratio for 0 to 1, _total for counters).

#include <ostream>

#include "poolrun/pool/state.hpp"

namespace poolrun::pool {

// Writes the families for `state` as of `now`. Cost: one pass over the nodes' GPUs and the leases.
void writeLiveMetrics(std::ostream& out, const PoolState& state, TimePoint now);

}  // namespace poolrun::pool
