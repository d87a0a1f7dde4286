#pragma once

// Slurm as the pool, on clusters that already run it:
//   slurm             inside an allocation (salloc's shell, an sbatch script): the lease is the
//                     allocation; poolrun renews and releases nothing, Slurm owns the lifetime
//   slurm:PARTITION   outside one: acquire() asks Slurm for an allocation in PARTITION (salloc)
//                     and release() gives it back, also after a failure or a signal
// The lease's GPUs are Slurm's GPU indexes on each node (gres.conf order, which is PCI bus order
// where gres.conf is autodetected or written in bus order), i.e. NodeTopology GPU indexes. The
// allocation's SLURM_* variables travel in Lease::env so that mpirun and srun run inside it.
//
// What Slurm prints and exports is read by the pure functions below (unit-tested against the
// forms Slurm uses); the commands themselves run behind SlurmSystem so the pool can be tested
// without Slurm.

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "poolrun/pool/client.hpp"

namespace poolrun::pool::slurm {

// A GPU index list as Slurm writes it in SLURM_STEP_GPUS, SLURM_JOB_GPUS and GRES IDX: "0,1,3",
// "0-1,3", "" (none). Sorted, without duplicates. Throws poolrun::Error (kBadInput) naming the text,
// also for an index above kMaxSlurmIndex.
inline constexpr size_t kMaxSlurmIndex = (size_t{1} << 20) - 1;
std::vector<size_t> parseIndexList(std::string_view text);

// The GPU indexes in a GRES string of `scontrol show job -d`: "gpu:2(IDX:0-1)",
// "gpu:a100:4(IDX:0,2-3)", "gpu:a100:1(IDX:0),gpu:v100:1(IDX:3)", "gpu(IDX:0-1)" (older
// releases), "gpu:0", "(null)". Other GRES (nic, mps, shard) are ignored.
std::vector<size_t> parseGresIndexes(std::string_view gres);

// What `scontrol show job -d JOBID` says about one job.
struct JobDetail {
  std::string id;
  std::string state;      // RUNNING, PENDING, ...
  std::string partition;  // Partition=
  std::string node_list;  // NodeList= (hostlist)
  // Per node, in NodeList order: the GPU indexes the job holds there (from the "Nodes=... GRES="
  // lines, hostlists expanded).
  std::vector<std::pair<std::string, std::vector<size_t>>> nodes;
  std::map<std::string, int> cpus;             // per node: how many CPUs (CPU_IDs) the job holds there
  std::map<std::string, std::string> cpu_ids;  // per node: those CPUs as Slurm writes them ("0-3,8")
};
// Throws poolrun::Error (kBadInput) when the text is not a job record.
JobDetail parseJobDetail(std::string_view text);

// ConstrainDevices from `scontrol show config` (its cgroup section): with it, every step sees only
// its own GPUs, renumbered from 0.
bool parseConstrainDevices(std::string_view showConfig);

// `scontrol show node -o` lines: NodeName -> the fields that describe the node's hardware
// (Arch, Boards, Sockets, CoresPerSocket, ThreadsPerCore, CPUTot, RealMemory, Gres), joined into
// one key that changes when the hardware does (the topology cache's key).
std::map<std::string, std::string> parseNodeHardware(std::string_view text);
// CPUTot of each node in the same output.
std::map<std::string, int> parseNodeCpus(std::string_view text);

// The salloc arguments for a request in `partition` (before the command salloc runs).
// Throws poolrun::Error (kBadInput) naming the values for requests Slurm cannot express.
std::vector<std::string> sallocArguments(const LeaseRequest& request, const std::string& partition);

// The Slurm job id of a lease of a Slurm pool ("slurm-JOB-PID[-N]"), "" for other leases.
std::string jobOfLease(const std::string& leaseId);

// How the pool runs Slurm: the environment it reads and the commands it starts.
class SlurmSystem {
 public:
  struct Output {
    int status = -1;  // exit status, 128+N for signal N, -1 when it could not be started
    std::string out, err;
  };
  virtual ~SlurmSystem() = default;
  virtual std::optional<std::string> env(const std::string& name) const = 0;
  virtual Output run(const std::vector<std::string>& argv) = 0;  // waits for it
  // Starts salloc with `argv` (ending in the command it runs); returns once the allocation is
  // granted, with the variables of its command (SLURM_*), or throws why not. release() ends it.
  struct Allocation {
    std::string job_id;
    std::map<std::string, std::string> env;
  };
  virtual Allocation allocate(const std::vector<std::string>& sallocArgs) = 0;
  virtual void relinquish(const std::string& job_id) = 0;
};

// The real one: getenv, fork/exec, and salloc with a small shell command that reports the
// allocation's variables and then reads a pipe from this process until relinquish() closes it or
// this process ends (so that a `kill -9` of poolrun still gives the allocation back at once). The
// command then exits 0: Slurm records the job as COMPLETED and starts its next job at once.
std::unique_ptr<SlurmSystem> realSlurmSystem();

// `uri` is "slurm" or "slurm:PARTITION". Throws poolrun::Error (kBadInput) naming the URI.
std::unique_ptr<PoolClient> openSlurmPool(const std::string& uri, std::unique_ptr<SlurmSystem> system);

}  // namespace poolrun::pool::slurm
