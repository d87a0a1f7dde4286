#pragma once

// The detached jobs an agent runs (docs/jobs.md): for each job poold gives its node, the launcher
// (`poolrun run --adopt-lease LEASE ...`) started as the job's user, in its directory, with its
// environment and output files, in a session of its own; signalled when the job is cancelled;
// reaped, and its end told to poold.

#include <sys/types.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "poolrun/pool/job_json.hpp"

namespace poolrun::agent {

struct JobRunnerOptions {
  std::string node;               // this node's name, for messages
  std::string pool;               // the pool's URI, given to each launcher as --pool
  std::filesystem::path poolrun;  // the launcher: poolrun, beside poold-agent by default
  std::filesystem::path ca_file;  // given to launchers as POOLRUN_CA where set
  // The records of the jobs started here (ID.job: the watcher's pid and start; ID.exit: how the
  // launcher ended), kept until poold has the job's end. Made at the first start.
  std::filesystem::path records;
};

// Each launcher runs under a watcher of its own, a process forked from the agent (as slurmstepd is
// to slurmd) that waits for it and writes how it ended into the records: the launcher outlives its
// agent (it renews its lease itself), and a restarted agent takes the jobs of its records back.
class JobRunner {
 public:
  // Takes back the jobs of the records: those still running are watched (their end noticed by
  // reap(), not by SIGCHLD), those that ended are reaped at the first reap().
  explicit JobRunner(JobRunnerOptions options);
  // Kills nothing: the watchers and launchers run on.
  ~JobRunner() = default;

  // Starts job `launch`'s launcher. Returns its report: kStarted, or kEnded with the reason it could
  // not start (the user unknown here or another uid here than where it was submitted, root without
  // poold --allow-root-jobs, its directory or output file, the launcher missing). A job already
  // running here is reported started again.
  pool::JobReport start(const pool::JobLaunch& launch);
  // Sends `signal` to job `id`'s launcher and everything in its session; false where it does not
  // run here.
  bool signal(const std::string& id, int signal);
  // The jobs whose launcher has ended since the last call, each with its report. Their records stay
  // until reported(): a report lost with the agent is made again from them.
  std::vector<std::pair<std::string, pool::JobReport>> reap();
  // Poold has job `id`'s end (or refused it for good): its records go.
  void reported(const std::string& id);
  size_t running() const { return watched_.size(); }
  // The jobs taken back from the records whose end reap() has not seen yet.
  size_t takenBack() const {
    return static_cast<size_t>(
        std::count_if(watched_.begin(), watched_.end(), [](const auto& w) { return !w.second.child; }));
  }

 private:
  struct Watcher {
    pid_t pid = 0;  // 0: none known (the end is in the records, or lost)
    unsigned long long start =
        0;               // its start in clock ticks after boot (/proc/PID/stat), against reused pids
    bool child = false;  // started by this agent (waitpid), else taken back from the records
  };
  bool alive(const Watcher& w) const;
  void takeBack();
  pool::JobReport endOf(const std::string& id) const;
  // What `launch` runs as here: its groups, and the login variables its environment gets where it
  // lacks them (HOME, USER, LOGNAME, SHELL from the password database, as a login sets them).
  struct Account {
    std::vector<gid_t> groups;
    std::vector<std::string> login_env;
  };
  // Why `launch` may not run here as its user ("" where it may), and its account where it may.
  std::string checkUser(const pool::JobLaunch& launch, Account& account) const;
  JobRunnerOptions options_;
  std::map<std::string, Watcher> watched_;  // by job id
};

}  // namespace poolrun::agent
