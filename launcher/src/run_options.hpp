#pragma once

// `poolrun [options] -n N [--] PROGRAM [ARGS...]`: the options of a run, read and checked before
// anything starts (a bad value is a bad command line, exit status 2).

#include <chrono>
#include <csignal>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "poolrun/launcher/mpi.hpp"
#include "poolrun/launcher/plan.hpp"
#include "poolrun/pool/client.hpp"

namespace poolrun::launcher {

inline constexpr int kMaxRetries = 100;  // --retries' bound

struct RunOptions {
  std::vector<std::string> program;  // PROGRAM [ARGS...]
  PlanRequest request;               // -n, --gpus-per-node, --fabric, --gdr, --roce-tc, the user's variables
  std::string pool;                  // --pool, else $POOLRUN_POOL, else local
  // Where the GPUs may be, as poolctl acquire takes it: only whole_nodes, gpu_model,
  // min_memory_bytes, labels, one_switch and account are read from it (--whole-nodes, --model,
  // --min-memory-gib, --label, --one-switch, --account).
  pool::LeaseRequest placement;
  std::string token_file;
  std::string ca_file;  // --ca: an https pool's CAs
  int priority = 0;
  bool no_reclaim = false;       // --no-reclaim: the lease is never ended as idle (administrators only)
  bool preemptible = false;      // --preemptible: a waiting request of higher priority may preempt the lease
  int preempt_signal = SIGTERM;  // --preempt-signal: what a preempted job is sent
  bool requeue = false;          // --requeue: a preempted job is queued again and restarted
  int retries = 0;               // --retries: a failed job restarted so many times, without failed nodes
  // -n MIN:MAX: an elastic lease of request.ranks (MIN) to max_ranks GPUs; the job is restarted
  // at each new size (docs/elastic.md). 0: -n N, a fixed size.
  int max_ranks = 0;
  std::chrono::seconds resize_interval{600};  // --resize-interval: the least time between growths
  // --mig PROFILE[+]: one MIG instance of that profile (or larger, '+') per rank instead of a GPU.
  std::string mig_profile;
  bool mig_or_larger = false;
  // --share FRACTION, --gpu-memory BYTES: an MPS share of a GPU per rank (pool::LeaseRequest).
  int share_percent = 0;
  uint64_t share_memory_bytes = 0;
  std::optional<std::chrono::seconds> wait;  // nullopt: while the pool could ever fit the job
  std::chrono::seconds lease_ttl{60};
  std::optional<std::chrono::seconds> timeout;
  std::string job_name;  // --name, else the program's file name
  bool tuner = true;
  std::optional<MpiFlavor> mpi_flavor;  // nullopt: detected
  std::string mpirun = "mpirun";
  std::string job_dir;               // --job-dir; empty: under the state directory
  std::string topology_file;         // Slurm pools: --topology
  bool srun = false;                 // --launcher srun
  std::vector<std::string> exports;  // -x VAR[=VALUE], as given
  // Planned variables of poolrun's environment that -x does not name: not used (shellPlannedVariables).
  std::vector<std::pair<std::string, std::string>> shell_env;
  std::vector<std::pair<std::string, std::string>> mca;  // --mca KEY VALUE
  std::vector<std::string> mpirun_args;                  // --mpirun-arg ARG
  bool tag_output = false;
  bool dry_run = false;
  bool simulate = false;  // --simulate: the leased nodes run on this machine
  // --launch: how mpirun starts a poold pool's nodes' daemons: through their agents (launch.md),
  // over ssh, or auto (the agents where every node's agent starts daemons, else ssh).
  std::string launch = "auto";
  bool doctor = true;  // false: --no-doctor
  // Detached jobs (docs/jobs.md): --detach submits the job to a poold and returns its id; the pool
  // keeps it and a node's agent starts it later with --adopt-lease, the lease granted to it.
  bool detach = false;
  std::string output, error, chdir;      // --output, --error (patterns: %j %a %u %x), --chdir
  std::string export_mode = "ALL";       // --export ALL|NONE|VAR,...
  std::string dependency, array;         // --dependency, --array, as given
  uint64_t mem_per_gpu = 0;              // --mem-per-gpu, bytes; 0: none
  std::string adopt_lease;               // --adopt-lease LEASE: run on this lease, acquire none
  std::vector<std::string> option_args;  // the options as given (--name=VALUE), for the stored job
};

// The lease a run asks the pool for, and the pool it asks (its token and CA from the options or
// the environment).
pool::LeaseRequest leaseRequest(const RunOptions& o);
std::unique_ptr<pool::PoolClient> openJobPool(const RunOptions& o);
// poolrun --detach (detach.cpp): submits the job, prints its id; the exit status.
int submitDetached(const RunOptions& o, std::ostream& out, std::ostream& err);

// The signals --preempt-signal takes, by name (TERM, SIGTERM, term) or number (15); nullopt for any
// other. KILL and STOP cannot be caught, and mpirun does not pass on others (docs/preemption.md).
std::optional<int> preemptSignalFromString(const std::string& text);

// Reads `args` into `options`. Returns nullopt to go on; 0 after printing --help on `out`; 2 after
// printing "poolrun: error: ..." and the usage on `err`.
std::optional<int> parseRunOptions(const std::vector<std::string>& args, RunOptions& options,
                                   std::ostream& out, std::ostream& err);

}  // namespace poolrun::launcher
