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
#include <ostream>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "poolrun/agent/lease_cgroup.hpp"
#include "poolrun/pool/job_json.hpp"
#include "poolrun/topo/topology.hpp"

namespace poolrun::agent {

struct JobRunnerOptions {
  std::string node;               // this node's name, for messages
  std::string pool;               // the pool's URI, given to each launcher as --pool
  std::filesystem::path poolrun;  // the launcher: poolrun, beside poold-agent by default
  std::filesystem::path ca_file;  // given to launchers as POOLRUN_CA where set
  // The records of the jobs started here (ID.job: the watcher's pid and start; ID.exit: how the
  // launcher ended), kept until poold has the job's end. Made at the first start.
  std::filesystem::path records;
  // Confinement (lease_cgroup.hpp): the cgroup version leases are confined with, none where they
  // are not; the mounts, the parent cgroup, and per GPU index its /dev/nvidiaN minor.
  std::optional<CgroupVersion> cgroup = {};
  CgroupMounts cgroup_mounts = {};
  std::string cgroup_parent = "poolrun";
  std::optional<int64_t> lease_pids = {};  // at most so many processes and threads per lease
  std::vector<uint32_t> gpu_minors = {};
  // Per MIG unit k (the pool's unit gpus + k): its GPU's index and the capability device nodes
  // (/dev/nvidia-caps/nvidia-capN) of its GPU instance and compute instance, where the driver has
  // them; a lease may open those of its own units alone.
  struct MigUnitDevices {
    size_t gpu = 0;
    std::optional<CharDevice> gpu_instance, compute_instance;
  };
  std::vector<MigUnitDevices> mig_units = {};
};

// Sets `options`' confinement from poold-agent's --cgroup (auto, v1, v2, none) and
// --cgroup-parent: the version (auto: v1 where a v1 devices hierarchy is mounted, else v2; none
// where the agent is not root or neither is mounted), the mounts, and the GPUs' minor numbers (from
// PROC/driver/nvidia/gpus/PCI/information, else the GPU's index). Says on `log` what it chose.
// Throws poolrun::Error (kBadInput) where the version asked for is not mounted.
void confineJobs(JobRunnerOptions& options, const std::string& cgroup, const std::string& parent,
                 const topo::NodeTopology& topology, const std::filesystem::path& proc, std::ostream& log);

// What a job's launcher on this node may do: the node's GPUs its lease does not hold are refused.
Confinement confinementOf(const JobRunnerOptions& options, const pool::JobLaunch& launch);

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
  // What went wrong since the last call that no report says (a lease's cgroup left behind), for the
  // agent's log.
  std::vector<std::string> takeNotes() { return std::exchange(notes_, {}); }
  // The jobs taken back from the records whose end reap() has not seen yet.
  size_t takenBack() const {
    return static_cast<size_t>(
        std::count_if(watched_.begin(), watched_.end(), [](const auto& w) { return !w.second.child; }));
  }
  // Whether reap() has work without a SIGCHLD: jobs taken back, or leases' cgroups that could not be
  // removed yet (tried again at each reap()).
  bool wantsPolling() const { return takenBack() > 0 || !cgroups_left_.empty(); }

 private:
  struct Watcher {
    std::string lease;             // its cgroup's name, where confined
    pid_t pid = 0;                 // 0: none known (the end is in the records, or lost)
    unsigned long long start = 0;  // its start in ticks after boot (/proc/PID/stat), against reused pids
    bool child = false;            // started by this agent (waitpid), else taken back from the records
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
  std::vector<std::string> notes_;
  std::set<std::string> cgroups_left_;  // leases whose cgroup destroy() could not remove yet
  // Kills what lease `lease`'s cgroup holds and removes it, within `limit`; a failure is noted once
  // and the lease kept in cgroups_left_.
  void endCgroup(const std::string& lease, std::chrono::milliseconds limit);
};

}  // namespace poolrun::agent
