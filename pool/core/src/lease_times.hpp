// When a lease's GPUs are free again, as the scheduler and the lease rules reckon it.
#pragma once

#include <algorithm>
#include <chrono>

#include "poolrun/pool/state.hpp"

namespace poolrun::pool {

// t + d, or kNever where that is past what a TimePoint holds (t before the epoch included).
inline TimePoint addSaturating(TimePoint t, std::chrono::seconds d) {
  constexpr std::chrono::seconds kLongest =
      std::chrono::duration_cast<std::chrono::seconds>(TimePoint::duration::max());
  if (t == kNever || d >= kLongest) return kNever;
  if (d > std::chrono::seconds(0) && t > kNever - std::chrono::duration_cast<TimePoint::duration>(d))
    return kNever;
  return t + d;
}

// The latest a lease may hold its GPUs: its maximum end, and for a preempted one its deadline and
// the margin for the kill.
inline TimePoint leaseEnd(const Lease& lease, const PreemptOptions& preempt) {
  TimePoint end = lease.max_end.value_or(kNever);
  if (lease.preempt_at) end = std::min(end, addSaturating(*lease.preempt_at, preempt.kill_margin));
  return end;
}

// The latest an elastic lease under a shrink notice holds the GPUs it gives back.
inline TimePoint shrinkEnd(const Lease& lease, const PreemptOptions& preempt) {
  return lease.shrink_at ? addSaturating(*lease.shrink_at, preempt.kill_margin) : kNever;
}

}  // namespace poolrun::pool
