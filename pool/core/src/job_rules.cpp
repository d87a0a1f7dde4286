// Jobs the pool keeps, joined to the queue and their leases (docs/jobs.md): a pending job is queued
// where its dependencies and its array's limit let it, its grant makes it run on its lease's first
// node, and its agent's reports end it.

#include <algorithm>

#include "poolrun/common/error.hpp"
#include "poolrun/common/names.hpp"
#include "poolrun/pool/job_plan.hpp"
#include "poolrun/pool/state.hpp"

namespace poolrun::pool {

using Key = JobBook::Key;

std::vector<std::string> PoolState::submitJob(JobSpec spec, const std::optional<JobArray>& array,
                                              TimePoint now) {
  spec.request.owner = spec.owner;
  spec.request.wait.reset();  // a job the pool keeps waits as long as the pool could ever run it
  validateRequest(spec.request);
  chargeAccount(spec.request);
  checkReservation(spec.request, now);
  if (!everFits(spec.request))
    throw PoolError(PoolFailure::kNeverFits, ErrorCode::kUnsupported,
                    "the pool can never run this job as asked (" + std::to_string(spec.request.gpus) +
                        " GPUs): it has too few GPUs that match, or too few nodes for its shape");
  std::vector<std::string> ids = jobs_.add(std::move(spec), array, now, job_options_, dirty_);
  replan_ = true;
  return ids;
}

std::vector<std::string> PoolState::cancelJob(const std::string& id, const std::string& by, bool admin,
                                              int signal, TimePoint now) {
  const std::vector<const JobRecord*> named = jobs_.named(id);
  if (named.empty())
    throw Error(ErrorCode::kNotFound, "no job " + common::printable(id) +
                                          " (poolctl jobs lists them; ended ones are kept for poold's "
                                          "--job-retention)");
  if (!admin && named.front()->spec.owner != by)
    throw PoolError(PoolFailure::kForbidden, ErrorCode::kBadInput,
                    "owner " + by + " may not cancel job " + id + " of " + named.front()->spec.owner +
                        " (only its owner or an administrator may)");
  std::vector<Key> keys;
  for (const JobRecord* j : named)
    if (!isFinal(j->state)) keys.push_back(*JobBook::keyOf(j->id));
  std::vector<std::string> done;
  for (const Key& key : keys) {
    const JobRecord& job = jobs_.records().at(key);
    if (job.state == JobState::kRunning) {
      jobs_.update(key, now, dirty_, [&](JobRecord& j) {
        j.cancelled_by = by;
        j.cancel_signal = signal;
      });
    } else {
      const int64_t ticket = job.ticket;
      jobs_.update(key, now, dirty_, [&](JobRecord& j) {
        j.cancelled_by = by;
        j.ticket = 0;
        jobs_.setState(j, JobState::kCancelled, "cancelled by " + by, now);
      });
      if (ticket != 0) cancel(ticket, now);
    }
    done.push_back(JobBook::idOf(key));
  }
  return done;
}

void PoolState::advanceJobs(TimePoint now) {
  // The keys first: each step may move a job out of the active set.
  const std::vector<Key> active(jobs_.active().begin(), jobs_.active().end());
  for (const Key& key : active) {
    const JobRecord& job = jobs_.records().at(key);
    if (job.state == JobState::kRunning)
      advanceRunningJob(key, now);
    else
      advancePendingJob(key, now);
  }
  jobs_.forgetOld(now, job_options_, dirty_);
}

void PoolState::advancePendingJob(const Key& key, TimePoint now) {
  const JobRecord& job = jobs_.records().at(key);
  if (job.ticket != 0) {
    auto it = queue_.find(job.ticket);
    if (it == queue_.end()) {  // withdrawn by hand (poolctl): queued again below, next tick
      jobs_.update(key, now, dirty_, [](JobRecord& j) { j.ticket = 0; });
    } else if (it->second.status == QueueEntry::Status::kWaiting) {
      it->second.heartbeat = now;  // the pool is its client: it never goes stale
    }
    return;
  }
  const auto stateOf = [this](const std::string& id) -> std::optional<JobState> {
    const std::vector<const JobRecord*> named = jobs_.named(id);
    if (named.empty()) return std::nullopt;
    // An array's number: the worst of its tasks (any still running; else any that did not complete).
    std::optional<JobState> worst;
    for (const JobRecord* j : named)
      if (!isFinal(j->state) || (!worst && j->state != JobState::kCompleted)) worst = j->state;
    return worst.value_or(JobState::kCompleted);
  };
  const auto singletonBusy = [&] {
    for (const Key& other : jobs_.active()) {
      if (other >= key) break;
      const JobRecord& o = jobs_.records().at(other);
      if (o.spec.owner == job.spec.owner && o.spec.name == job.spec.name) return true;
    }
    return false;
  };
  const DependencyVerdict verdict = judgeDependencies(job.spec.dependencies, stateOf, singletonBusy);
  if (verdict.kind == DependencyVerdict::Kind::kImpossible) {
    jobs_.update(key, now, dirty_,
                 [&](JobRecord& j) { jobs_.setState(j, JobState::kCancelled, verdict.reason, now); });
    return;
  }
  std::string reason = verdict.reason;
  if (reason.empty() && job.array_limit > 0) {
    int busy = 0;
    for (auto it = jobs_.records().lower_bound({key.first, -1});
         it != jobs_.records().end() && it->first.first == key.first; ++it)
      if (it->second.state == JobState::kRunning || it->second.ticket != 0) ++busy;
    if (busy >= job.array_limit)
      reason = "JobArrayTaskLimit (" + std::to_string(busy) + " of its array's tasks run or wait, at most " +
               std::to_string(job.array_limit) + ")";
  }
  if (!reason.empty()) {
    if (reason != job.reason) jobs_.update(key, now, dirty_, [&](JobRecord& j) { j.reason = reason; });
    return;
  }
  QueueEntry entry;
  entry.ticket = next_ticket_++;
  entry.request = job.spec.request;
  entry.request.job_name = job.id;
  entry.enqueued = now;
  entry.heartbeat = now;
  const int64_t ticket = entry.ticket;
  enqueue(std::move(entry));
  dirty_.queue.insert(ticket);
  dirty_.counters = true;
  replan_ = true;
  jobs_.update(key, now, dirty_, [&](JobRecord& j) {
    j.ticket = ticket;
    j.reason = "Resources (queued under ticket " + std::to_string(ticket) + ")";
  });
}

void PoolState::advanceRunningJob(const Key& key, TimePoint now) {
  const JobRecord& job = jobs_.records().at(key);
  auto lease = leases_.find(job.lease);
  if (lease != leases_.end()) {
    if (lease->second.preempt_at && !job.preempted)
      jobs_.update(key, now, dirty_, [](JobRecord& j) { j.preempted = true; });
    return;
  }
  // Its lease ended while the job runs: its launcher released it and the agent's report is on its
  // way, unless the job never started, or its node is lost.
  auto node = nodes_.find(job.node);
  const bool lost = node == nodes_.end() || node->second.live.unreachable;
  if (job.launched && !lost) return;
  jobs_.update(key, now, dirty_, [&](JobRecord& j) {
    j.credential.clear();
    if (lost)
      jobs_.setState(j, JobState::kNodeFail,
                     "node " + j.node + " stopped answering while the job ran (lease " + j.lease + " ended)",
                     now);
    else
      jobs_.setState(j, JobState::kFailed,
                     "lease " + j.lease + " ended before the agent of node " + j.node + " started the job",
                     now);
  });
}

void PoolState::collectJobGrants(TimePoint now) {
  std::vector<std::pair<Key, int64_t>> queued;
  for (const Key& key : jobs_.active())
    if (const JobRecord& j = jobs_.records().at(key); j.ticket != 0) queued.emplace_back(key, j.ticket);
  for (const auto& [key, ticket] : queued) {
    auto it = queue_.find(ticket);
    if (it == queue_.end() || it->second.status == QueueEntry::Status::kWaiting) continue;
    const QueueEntry entry = it->second;
    dequeue(it);
    dirty_.queue.insert(ticket);
    auto lease = leases_.find(entry.lease_id);
    jobs_.update(key, now, dirty_, [&](JobRecord& j) {
      j.ticket = 0;
      if (entry.status == QueueEntry::Status::kFailed || lease == leases_.end()) {
        jobs_.setState(j, JobState::kFailed,
                       entry.status == QueueEntry::Status::kFailed ? entry.reason : "its lease ended at once",
                       now);
        return;
      }
      j.lease = lease->second.id;
      usage_.setJob(j.lease, j.id, dirty_);
      j.node = lease->second.gpus.front().node;
      j.launched = false;
      j.credential.clear();
      j.preempted = false;
      j.started = now;
      j.exit_status.reset();
      j.signal.reset();
      jobs_.setState(j, JobState::kRunning, "", now);
    });
  }
}

std::vector<const JobRecord*> PoolState::jobWork(const std::string& node) const {
  std::vector<const JobRecord*> out;
  if (const std::set<Key>* work = jobs_.workOf(node))
    for (const Key& key : *work) out.push_back(&jobs_.records().at(key));
  return out;
}

const JobRecord& PoolState::nodesJob(const std::string& node, const std::string& id) const {
  const JobRecord* job = jobs_.find(id);
  if (job == nullptr || job->node != node)
    throw Error(ErrorCode::kNotFound,
                "node " + node + " runs no job " + common::printable(id) + " (the pool gave it no such job)");
  return *job;
}

void PoolState::setJobCredential(const std::string& node, const std::string& id, const std::string& hash) {
  const JobRecord& job = nodesJob(node, id);
  if (job.state != JobState::kRunning)
    throw Error(ErrorCode::kNotFound, "job " + id + " does not run (it is " +
                                          std::string(toString(job.state)) +
                                          "): there is no launcher to start");
  jobs_.update(*JobBook::keyOf(id), view_time_, dirty_, [&](JobRecord& j) { j.credential = hash; });
}

void PoolState::jobStarted(const std::string& node, const std::string& id, TimePoint now) {
  const JobRecord& job = nodesJob(node, id);
  if (job.state != JobState::kRunning || job.launched) return;  // said again, or ended meanwhile
  jobs_.update(*JobBook::keyOf(id), now, dirty_, [](JobRecord& j) { j.launched = true; });
}

void PoolState::jobSignalled(const std::string& node, const std::string& id) {
  const JobRecord& job = nodesJob(node, id);
  if (job.cancel_signal == 0) return;
  jobs_.update(*JobBook::keyOf(id), view_time_, dirty_, [](JobRecord& j) { j.cancel_signal = 0; });
}

namespace {

// The state a job ends in by its launcher's exit.
std::pair<JobState, std::string> endOf(const JobRecord& j, const JobExit& exit) {
  if (!j.cancelled_by.empty()) return {JobState::kCancelled, "cancelled by " + j.cancelled_by};
  if (!exit.reason.empty()) return {JobState::kFailed, exit.reason};
  if (j.preempted) return {JobState::kPreempted, "its lease " + j.lease + " was preempted"};
  if (exit.signal != 0)
    return {JobState::kFailed, "its launcher was killed by signal " + std::to_string(exit.signal)};
  if (exit.exit_status == 0) return {JobState::kCompleted, ""};
  if (exit.exit_status == 124 && j.spec.time_limit)
    return {JobState::kTimeout,
            "past its time limit of " + std::to_string(j.spec.time_limit->count()) + " s"};
  return {JobState::kFailed, "exit status " + std::to_string(exit.exit_status)};
}

}  // namespace

void PoolState::jobEnded(const std::string& node, const std::string& id, const JobExit& exit, TimePoint now) {
  const JobRecord& job = nodesJob(node, id);
  if (job.state != JobState::kRunning) return;  // the same report again
  const std::string lease = job.lease;
  const std::pair<JobState, std::string> end = endOf(job, exit);
  const JobState state = end.first;
  const std::string& reason = end.second;
  const bool requeue = state == JobState::kPreempted && job.spec.requeue;
  jobs_.update(*JobBook::keyOf(id), now, dirty_, [&](JobRecord& j) {
    j.credential.clear();
    j.cancel_signal = 0;
    j.exit_status = exit.reason.empty() ? std::optional<int>(exit.exit_status) : std::nullopt;
    j.signal = exit.signal != 0 ? std::optional<int>(exit.signal) : std::nullopt;
    j.ended = now;
    if (!requeue) {
      jobs_.setState(j, state, reason, now);
      return;
    }
    jobs_.setState(j, JobState::kRequeued, reason + ": requeued (--requeue)", now);
    ++j.restarts;
    j.node.clear();
    j.launched = false;
    j.preempted = false;
    jobs_.setState(j, JobState::kPending,
                   "requeued after preemption (restart " + std::to_string(j.restarts) + ")", now);
    j.ended = TimePoint{};
  });
  if (leases_.count(lease)) dropLease(lease, now, LeaseEvent::Kind::kReleased, "its job " + id + " ended");
}

namespace {

// plannedJobStart's walk over a job's ancestors, `budget` visits at most (diamonds in a large
// pipeline would otherwise be walked once per path).
struct PlannedWalk {
  const PoolState& pool;
  int budget = 4 * kPlannedChainDepth;

  std::optional<TimePoint> end(const JobRecord& j, int depth) {
    if (isFinal(j.state)) return j.ended;
    if (!j.spec.time_limit) return std::nullopt;
    const std::optional<TimePoint> begin = start(j, depth);
    if (!begin) return std::nullopt;
    return *begin + *j.spec.time_limit;
  }

  std::optional<TimePoint> start(const JobRecord& j, int depth) {
    if (--budget < 0 || depth > kPlannedChainDepth) return std::nullopt;
    if (j.state == JobState::kRunning) return j.started;
    if (j.state != JobState::kPending) return std::nullopt;
    if (j.ticket != 0) {
      const std::optional<TimePoint> planned = pool.plannedStart(j.ticket);
      return planned && *planned != kNever ? planned : std::nullopt;
    }
    if (j.spec.dependencies.empty()) return std::nullopt;  // held by its array's limit
    std::optional<TimePoint> latest;
    for (const JobDependency& d : j.spec.dependencies) {
      if (d.kind == JobDependency::Kind::kSingleton) return std::nullopt;
      for (const std::string& id : d.jobs)
        for (const JobRecord* parent : pool.jobs().named(id)) {
          const std::optional<TimePoint> e = end(*parent, depth + 1);
          if (!e) return std::nullopt;
          latest = latest ? std::max(*latest, *e) : *e;
        }
    }
    return latest;
  }
};

}  // namespace

std::optional<TimePoint> plannedJobStart(const PoolState& pool, const JobRecord& job) {
  if (job.state != JobState::kPending) return std::nullopt;
  return PlannedWalk{pool}.start(job, 0);
}

}  // namespace poolrun::pool
