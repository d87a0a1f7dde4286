#pragma once

// The jobs the pool keeps (docs/jobs.md): every record, the indexes the rules look them up by, and
// the rules of a record alone (its id, its owner's cap, its state's changes, its credential, its
// forgetting). The rules that join a job to the queue and its lease are PoolState's
// (src/job_rules.cpp). Part of PoolState: stored, replicated and restored with it.

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "poolrun/pool/jobs.hpp"

namespace poolrun::pool {

struct Dirty;  // state.hpp

// poold's options for jobs.
struct JobOptions {
  // Jobs an owner may have pending or running at once (an array counts its tasks): one user's
  // script gone wrong cannot fill the pool's store.
  size_t max_active_per_owner = 5000;
  // Ended jobs are kept this long, and the newest kMaxKept at most (a running job is never forgotten).
  std::chrono::seconds retention{30 * 86'400};
  size_t max_kept = 100'000;
  // Whether a job may run as root (uid 0): poold --allow-root-jobs.
  bool allow_root = false;
};

// A job's state changed: what poold's event log records.
struct JobEvent {
  std::string job;
  std::optional<JobState> from;  // nullopt: submitted
  JobState to = JobState::kPending;
  std::string reason;
};

// How a job's launcher ended, as its node's agent saw it.
struct JobExit {
  int exit_status = 0;  // the launcher's (poolrun's): 124 past its time, 128+N for signal N
  int signal = 0;       // where a signal ended the launcher itself
  std::string reason;   // where it could not start ("cannot change to /home/x: Permission denied")
};

class JobBook {
 public:
  // A job's place in the book: its number and task (-1: not an array's), so that J9 sorts before J10.
  using Key = std::pair<int64_t, int>;
  // The key of an id (isJobId's form); nullopt for anything else.
  static std::optional<Key> keyOf(std::string_view id);
  static std::string idOf(const Key& key);

  // New records for `spec`: one job, or one per task of `array`, PENDING. Throws kBadInput for a
  // spec that cannot run (no command, a relative cwd, uid 0 unless allowed, a dependency on a job
  // the pool does not know) and kForbidden (PoolError kLimited) past the owner's cap. The new ids.
  std::vector<std::string> add(JobSpec spec, const std::optional<JobArray>& array, TimePoint now,
                               const JobOptions& options, Dirty& dirty);

  const JobRecord* find(std::string_view id) const;
  // Every task of an array named by its number alone ("J12"), or the one job `id` names.
  std::vector<const JobRecord*> named(std::string_view id) const;
  const std::map<Key, JobRecord>& records() const { return records_; }
  const std::set<Key>& active() const { return active_; }  // PENDING and RUNNING, oldest first
  size_t activeOf(const std::string& owner) const;
  // The job whose launcher holds the credential of SHA-256 `hash`, while it runs; nullptr where none.
  const JobRecord* ofCredential(const std::string& hash) const;
  // The job queued under `ticket`; nullptr where none.
  const JobRecord* ofTicket(int64_t ticket) const;
  // The running jobs the agent of `node` has work for (a launcher to start, a cancel's signal to
  // send); nullptr where none. A lookup: every heartbeat's reply asks it.
  const std::set<Key>* workOf(const std::string& node) const;
  int64_t nextNumber() const { return next_; }

  // Changes a record by `change`, then keeps the indexes and the events: a new state is recorded
  // with `reason` (the end time set where it ends), and the record marked dirty.
  template <class Change>
  void update(const Key& key, TimePoint now, Dirty& dirty, Change&& change);
  void setState(JobRecord& job, JobState to, std::string reason, TimePoint now);

  // Forgets ended jobs past the retention, and the oldest ended beyond max_kept.
  void forgetOld(TimePoint now, const JobOptions& options, Dirty& dirty);

  std::vector<JobEvent> takeEvents() { return std::exchange(events_, {}); }

  // Persistence (stores); load throws kBadInput for a record that is not whole.
  void load(JobRecord job);
  void loadNextNumber(int64_t next) { next_ = std::max(next_, next); }
  void clear();

 private:
  JobRecord& at(const Key& key) { return records_.at(key); }
  void unindex(const JobRecord& job, const Key& key);
  void index(const JobRecord& job, const Key& key);
  void markDirty(const Key& key, Dirty& dirty) const;

  std::map<Key, JobRecord> records_;
  std::set<Key> active_;
  std::unordered_map<std::string, size_t> active_by_owner_;
  std::unordered_map<std::string, Key> by_credential_;
  std::unordered_map<int64_t, Key> by_ticket_;
  std::unordered_map<std::string, std::set<Key>> work_by_node_;
  std::set<std::pair<TimePoint, Key>> ended_;  // ended jobs, oldest end first
  int64_t next_ = 1;
  std::vector<JobEvent> events_;
};

template <class Change>
void JobBook::update(const Key& key, TimePoint now, Dirty& dirty, Change&& change) {
  JobRecord& job = at(key);
  unindex(job, key);
  const JobState before = job.state;
  change(job);
  if (job.state != before && isFinal(job.state) && job.ended == TimePoint{}) job.ended = now;
  index(job, key);
  markDirty(key, dirty);
}

}  // namespace poolrun::pool
