#pragma once

// Jobs the pool keeps (docs/jobs.md, being built: issue 41): what a detached job is, the states it
// goes through, its dependencies and arrays, as values and rules with no I/O and no clock of their
// own. The parts that submit, start and report jobs build on these.

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "poolrun/pool/types.hpp"

namespace poolrun::pool {

// A job's states, as Slurm's squeue names them.
enum class JobState {
  kPending,    // waiting: for its dependencies, its array's limit, or GPUs
  kRunning,    // its lease granted and its launcher started
  kCompleted,  // exit status 0
  kFailed,     // a non-zero exit status, a signal, or a start that could not be made
  kCancelled,  // by its owner or an administrator, or because a dependency can never be met
  kTimeout,    // past its time limit
  kPreempted,  // ended for a request of higher priority, not to be run again
  kRequeued,   // ended for a request of higher priority, pending again
  kNodeFail,   // a node of its lease was lost
};

std::string_view toString(JobState s);  // "PENDING", "RUNNING", ...
// The state `text` names (any case); nullopt for none.
std::optional<JobState> jobStateFromString(std::string_view text);
// Whether a job in `s` has ended for good (kRequeued has not: it is pending again).
bool isFinal(JobState s);

// --dependency afterok:ID[:ID],afterany:ID,afternotok:ID,singleton
struct JobDependency {
  enum class Kind { kAfterOk, kAfterAny, kAfterNotOk, kSingleton };
  Kind kind = Kind::kAfterOk;
  std::vector<std::string> jobs;  // none for kSingleton
  bool operator==(const JobDependency&) const = default;
};

// Reads a --dependency list. Throws kBadInput naming the part that is wrong: an unknown kind, a kind
// without a job, a job id that is not one (J and digits, with _TASK for an array's task), more than
// kMaxDependencies jobs.
std::vector<JobDependency> parseDependencies(std::string_view text);
std::string dependencyText(const std::vector<JobDependency>& deps);
inline constexpr size_t kMaxDependencies = 100;

// --array 0-99%8, 1,3,5-7, 0-15:4 (every 4th): the task indexes and how many may run at once.
struct JobArray {
  std::vector<int> tasks;  // ascending, each once
  int limit = 0;           // 0: no limit
  bool operator==(const JobArray&) const = default;
};
// Throws kBadInput naming what is wrong: an index out of 0..kMaxArrayIndex, a range backwards, a
// step of 0, a limit of 0, more than kMaxArrayTasks tasks, text that is none of these.
JobArray parseArray(std::string_view text);
inline constexpr int kMaxArrayIndex = 1'000'000;
inline constexpr size_t kMaxArrayTasks = 10'000;

// Whether `id` is a job id: "J" and 1 to 18 digits, with "_" and a task index for an array's task.
bool isJobId(std::string_view id);

// What the dependencies of a job say now, from the states of the jobs they name.
struct DependencyVerdict {
  enum class Kind { kReady, kWaiting, kImpossible };  // kImpossible: can never be met
  Kind kind = Kind::kReady;
  std::string reason;  // kWaiting: "Dependency (afterok:J12 still RUNNING)"; kImpossible: why not
};

// The state of a job by id; nullopt where the pool knows no such job (forgotten or never made).
using JobStateOf = std::function<std::optional<JobState>(const std::string& id)>;
// Whether another job of `owner` named `name` runs or waits ahead of this one (for singleton).
using SingletonBusy = std::function<bool()>;

// The verdict for `deps`: kImpossible where a job named is unknown, or ended so that the condition can
// no longer hold (afterok on a job that failed, afternotok on one that completed).
DependencyVerdict judgeDependencies(const std::vector<JobDependency>& deps, const JobStateOf& stateOf,
                                    const SingletonBusy& singletonBusy);

// What a job's owner submitted: what to run, as whom, where, and what to lease for it.
struct JobSpec {
  std::string name;   // --job-name; the program's name where none
  std::string owner;  // the pool's owner (token or MUNGE user)
  uint32_t uid = 0;   // whom the node's agent runs it as
  uint32_t gid = 0;
  std::vector<uint32_t> groups;      // supplementary groups
  std::vector<std::string> command;  // poolrun's run options, the program and its arguments
  std::string cwd;                   // the submit directory, or --chdir
  std::vector<std::string> env;      // NAME=VALUE, as --export chose
  std::string output, error;         // path patterns (%j %a %u %x %%); error empty: with the output
  LeaseRequest request;
  std::vector<JobDependency> dependencies;
  std::optional<std::chrono::seconds> time_limit;  // --time
  bool requeue = false;                            // --requeue: a preempted job waits again
  uint32_t umask = 022;                            // the submitter's: its output files' modes
  uint64_t mem_per_gpu = 0;                        // --mem-per-gpu: bytes per leased unit; 0: none
  bool operator==(const JobSpec&) const = default;
};

// A job as the pool keeps it.
struct JobRecord {
  std::string id;           // J12, or J12_3 for task 3 of array J12
  std::optional<int> task;  // its array index
  int array_limit = 0;      // its array's %N (0: none)
  JobSpec spec;
  JobState state = JobState::kPending;
  std::string reason;  // PENDING: why it waits; ended: why it ended where the state says less
  TimePoint submitted{}, started{}, ended{};
  std::string lease;               // while RUNNING, and the last one after
  std::optional<int> exit_status;  // its launcher's
  std::optional<int> signal;       // where a signal ended it
  std::string failed_node;         // FAILED: where the first rank failed, where known
  std::optional<int> failed_rank;
  std::string cancelled_by;
  int restarts = 0;  // times it was requeued
  // While it runs: where its launcher runs (its lease's first node), whether that node's agent has
  // started it, the SHA-256 of the credential its launcher holds (role user, its owner, its lease
  // alone), whether its lease was chosen for preemption, and the signal a cancel asked the agent
  // to send (0: none).
  int64_t ticket = 0;  // PENDING: its queue ticket (0: not queued yet)
  std::string node;
  bool launched = false;
  std::string credential;
  bool preempted = false;
  int cancel_signal = 0;
  bool operator==(const JobRecord&) const = default;
};

// `pattern` with %j (the job's id, without its task), %a (its array task, or nothing), %u (its
// owner), %x (its name) and %% (a %) replaced; relative paths are from the job's cwd. Throws
// kBadInput for another %-letter or a pattern that ends in %.
std::string expandJobPath(const std::string& pattern, const JobRecord& job);

}  // namespace poolrun::pool
