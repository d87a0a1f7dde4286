#pragma once

// When a pending job is planned to start (docs/jobs.md), for poolctl jobs and job.

#include <optional>

#include "poolrun/pool/state.hpp"

namespace poolrun::pool {

// When pending job `job` is planned to start: queued, the scheduler's planned start; held by its
// dependencies, the latest planned end of the jobs they name (an ended job's end; a running one's
// start, or a pending one's planned start, plus its --timeout), so that a pipeline's last step has
// one before its first has run. nullopt where any of those is unknown (a job without --timeout has
// no planned end; singleton; a chain deeper than kPlannedChainDepth) and for a job not pending.
inline constexpr int kPlannedChainDepth = 64;
std::optional<TimePoint> plannedJobStart(const PoolState& pool, const JobRecord& job);

}  // namespace poolrun::pool
