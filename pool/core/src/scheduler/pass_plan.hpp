// What a scheduling pass plans (PoolState::schedule), kept for the next enqueue (keptPlanFor).
#pragma once

#include <optional>
#include <set>
#include <vector>

#include "poolrun/pool/state.hpp"
#include "scheduler/timeline.hpp"

namespace poolrun::pool {

struct PoolState::PassPlan {
  // Until some request has to wait, nothing is promised: GPUs free now are simply those no lease
  // holds, and the timeline of lease ends is not needed (the common case, and the fast one).
  std::optional<Timeline> timeline;
  // Preemption, once some request has to wait: the leases that may be victims (the smallest
  // first, then the youngest), the elastic ones, and the requests whose victims are still ending.
  std::vector<const Lease*> victims, elastic;
  std::set<int64_t> awaitingVictims;
  std::vector<signed char> plainNodeOk;  // per slot, for requests without node constraints
  QuotaBook book;                        // kept up to date as the pass grants
  // Kept for an enqueue (keptPlanFor): when the pass ran, the first end of a lease after it (the
  // timeline frees its GPUs then, a tick drops it later), the lowest priority and the latest
  // enqueue time of the requests it planned, and plan_epoch_ as it left it.
  TimePoint at{}, valid_until = kNever, latest_enqueued{};
  int lowest_priority = 0;
  double lowest_score = 0;  // with accounts: the lowest multi-factor priority
  uint64_t epoch = 0;
};

}  // namespace poolrun::pool
