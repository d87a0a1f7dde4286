#pragma once

// The detached jobs an agent runs (docs/jobs.md): for each job poold gives its node, the launcher
// (`poolrun run --adopt-lease LEASE ...`) started as the job's user, in its directory, with its
// environment and output files, in a session of its own; signalled when the job is cancelled;
// reaped, and its end told to poold.

#include <sys/types.h>

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
};

class JobRunner {
 public:
  explicit JobRunner(JobRunnerOptions options);
  // Kills nothing: a launcher outlives its agent (it renews its lease itself), and a restarted agent
  // no longer knows it. Its end is then not reported (docs/jobs.md says what poold does).
  ~JobRunner() = default;

  // Starts job `launch`'s launcher. Returns its report: kStarted, or kEnded with the reason it could
  // not start (the user unknown here or another uid here than where it was submitted, root without
  // poold --allow-root-jobs, its directory or output file, the launcher missing). A job already
  // running here is reported started again.
  pool::JobReport start(const pool::JobLaunch& launch);
  // Sends `signal` to job `id`'s launcher and everything in its session; false where it does not
  // run here.
  bool signal(const std::string& id, int signal);
  // The jobs whose launcher has ended since the last call, each with its report.
  std::vector<std::pair<std::string, pool::JobReport>> reap();
  size_t running() const { return children_.size(); }

 private:
  // What `launch` runs as here: its groups, and the login variables its environment gets where it
  // lacks them (HOME, USER, LOGNAME, SHELL from the password database, as a login sets them).
  struct Account {
    std::vector<gid_t> groups;
    std::vector<std::string> login_env;
  };
  // Why `launch` may not run here as its user ("" where it may), and its account where it may.
  std::string checkUser(const pool::JobLaunch& launch, Account& account) const;
  JobRunnerOptions options_;
  std::map<std::string, pid_t> children_;  // by job id
};

}  // namespace poolrun::agent
