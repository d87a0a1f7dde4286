#pragma once

// poold-agent's loop: registers its node with poold, then sends a heartbeat every interval with the
// node's telemetry, and keeps doing so whatever poold does (down, refusing, asking for the node
// again). What crosses to poold is the documents of poolrun/pool/agent_protocol.hpp, nothing else.
//
// Every peer and every piece of hardware comes in behind a seam, so that tests run the loop without
// a network, a GPU or time passing: the link to poold (LinkFactory), the telemetry (Sampler), /proc
// (AgentConfig::proc_root) and the clock (AgentClock).

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "poolrun/agent/jobs.hpp"
#include "poolrun/pool/agent_link.hpp"
#include "poolrun/pool/agent_protocol.hpp"
#include "poolrun/topo/cluster.hpp"
#include "poolrun/topo/telemetry.hpp"

namespace poolrun::agent {

// What the agent reads of its node each interval.
struct NodeSamples {
  std::vector<topo::GpuSample> gpus;  // one per GPU of the topology, in index order
  std::vector<topo::NicPortSample> nics;
  bool nvml_ok = true;  // false: NVML is absent here, so that no GPU counts as lost
  // Per GPU, its MIG state as NVML reports it (empty, or nullopt for a GPU: not known). A layout that
  // differs from the registered topology's is registered again.
  std::vector<std::optional<topo::MigState>> mig;
};
using Sampler = std::function<NodeSamples()>;
// Makes a GPU's MIG layout (GPU index, GPU instance profiles in order): "" when done, else what
// failed and what to do.
using MigApplier = std::function<std::string(size_t gpu, const std::vector<std::string>& profiles)>;

// The MPS control daemons of the node's GPUs (poold's HeartbeatReply::mps_gpus): each call returns
// "" when done, else what failed and what to do.
struct MpsControl {
  std::function<std::string(size_t gpu)> start;  // a daemon already running there counts as started
  std::function<std::string(size_t gpu)> stop;
  std::function<std::set<size_t>()> running;  // the GPUs whose daemon runs now (found at start)
};
struct MpsOptions {
  std::filesystem::path dir = pool::kDefaultMpsDirectory;  // GPU N's daemon in pool::mpsPipeDirectory
  std::string control = "nvidia-cuda-mps-control";         // the program, found on PATH
  std::chrono::milliseconds limit{10000};                  // the most one call to it may take
};
// The real daemons: `control -d` started with CUDA_VISIBLE_DEVICES (the GPU's UUID, else its
// index), CUDA_MPS_PIPE_DIRECTORY and CUDA_MPS_LOG_DIRECTORY (its pipe directory's log/) set, and
// stopped with `quit` on its stdin. Whether one runs: the PID in its pipe directory's
// nvidia-cuda-mps-control.pid is alive.
MpsControl mpsControl(const topo::NodeTopology& topology, MpsOptions options);

// topo::TelemetrySampler over `topology`, NIC ports read under `sysfs_root`, which stands in for
// /sys as `poolrun topo --sysfs-root` does ("/sys" on a real node; a folder called sys). The sampler
// keeps NVML open; where NVML is absent it tries to open it again every minute (a driver that loads
// after the agent started).
// Where `applier` is given, it is set to make MIG layouts through the sampler's NVML.
Sampler telemetrySampler(const topo::NodeTopology& topology, const std::filesystem::path& sysfs_root,
                         MigApplier* applier = nullptr);

// Opens a link to poold with the token as it is now: the agent calls it before every registration,
// so that a token file fixed after a 401 is read again. Throws poolrun::Error (a token file that
// cannot be read).
using LinkFactory = std::function<std::unique_ptr<pool::AgentLink>()>;

// The agent's time. The loop never reads a clock or sleeps but through this.
struct AgentClock {
  // Waits `delay`; returns false, at once, where the agent is to stop.
  std::function<bool(std::chrono::milliseconds delay)> sleep;
  std::function<std::chrono::steady_clock::time_point()> now;
  std::function<double()> random;  // uniform in [0, 1): the jitter of the retries
  // Ends the sleep under way, or the next, at once (sleep returns true): detached jobs' news
  // (Agent::wakeForJobs). Empty where the clock cannot be woken: the agent then learns of its jobs
  // at its heartbeats alone.
  std::function<void()> wake = {};
};

// A stop request that ends the real clock's sleep at once (SIGTERM, SIGINT).
class StopSignal {
 public:
  StopSignal();
  ~StopSignal();
  StopSignal(const StopSignal&) = delete;
  StopSignal& operator=(const StopSignal&) = delete;
  void request();
  bool requested() const;
  // Waits `delay`, until request() or until the function waker() returns is called; false where
  // requested.
  bool waitFor(std::chrono::milliseconds delay);
  // Ends the wait under way, or the next, at once; from any thread, and safe to call after this
  // StopSignal is gone (it shares what it needs).
  std::function<void()> waker() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

// The steady clock, a sleep that `stop` ends, a seeded random generator.
AgentClock systemClock(StopSignal& stop);

// The cgroups of leases on the node (docs/confinement.md). After each heartbeat the agent ends the
// cgroup of every lease that had one before the heartbeat was sent and that poold's replies to it
// and to the heartbeat before no longer list on the node (HeartbeatReply::leases): the lease was
// released, expired, preempted or cancelled, so whatever still runs in it is killed, however it
// was started (a daemon of the launch port, a detached job's launcher, what either forked, what an
// agent that crashed left). Two replies: a launcher that released its lease may still be exiting.
struct LeaseCgroups {
  std::function<std::set<std::string>()> list;  // the leases with a cgroup on the node now
  // Kills what lease's cgroup holds and removes it: the number of processes killed. Throws
  // poolrun::Error where it cannot (tried again after the next heartbeat).
  std::function<size_t(const std::string& lease)> end;
};

struct AgentConfig {
  topo::ClusterNode node;  // name, topology (probed or read), switch, labels
  std::string agent_version = "poold-agent";
  std::chrono::seconds interval{5};
  std::filesystem::path proc_root = "/proc";  // where PID/environ is read (processLeases)
  std::filesystem::path job_mapping_dir;      // dcgm-exporter's files (JobMappingFiles); empty: none
  // Makes the MIG layouts poold asks for (HeartbeatReply::mig_layouts); null: every one fails,
  // saying this agent cannot.
  MigApplier apply_mig;
  // Runs the MPS control daemons poold asks for (HeartbeatReply::mps_gpus); empty functions: every
  // start fails, saying this agent cannot.
  MpsControl mps;
  // Where the node's agent starts jobs' daemons (NodeRegistration::launch); empty: it does not.
  std::string launch;
  // Runs the detached jobs poold gives the node (HeartbeatReply::jobs); nullopt: none is asked for.
  std::optional<JobRunnerOptions> jobs;
  // Where leases are confined to cgroups: those of ended leases ended. Empty functions: none.
  LeaseCgroups lease_cgroups;
  // The node's health checks (poold-agent --health-interval, health.hpp): "" where they pass, else
  // what failed (Heartbeat::health_failure). Run at the start and every health_interval while no
  // lease holds anything on the node (as the last reply said); empty: none.
  std::function<std::string()> health_check;
  std::chrono::seconds health_interval{300};
};

// How long the agent waits before it tries again after a refusal (401, 403, 404): long enough not
// to flood poold's log, short enough that a fixed token file is picked up soon.
inline constexpr std::chrono::seconds kRefusedRetry{30};

class Agent {
 public:
  // `log` takes the agent's lines (one per event, never one per attempt): poold-agent's stderr.
  Agent(AgentConfig config, LinkFactory link, Sampler sampler, AgentClock clock, std::ostream& log);
  ~Agent();
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  // Registers, then heartbeats, until the clock's sleep says stop: returns 0 then. Returns 1 where
  // poold refused the registration document itself (400): sending it again would not help.
  //
  // Each round: register where needed; sample; where a NIC port's state differs from the
  // registered topology's, update the topology and register it again; heartbeat; where the reply
  // says register_again, register again, else write the job-mapping files (a reply asking for the
  // node says nothing of its leases) and end the cgroups of leases that ended (LeaseCgroups); wait
  // the interval (poold's reply interval where it is shorter). At most three calls to poold a round.
  //
  // poold unreachable (poolrun::Error kIo): one line when it starts, one when poold answers again;
  // meanwhile retries after 1 s, 2 s, 4 s ... up to the interval, each within +-25% (jitter).
  // Refused (401, 403, 404, a heartbeat's 400): the line poold sent, once per distinct message;
  // the link is opened again (the token file re-read) and the node registered again after
  // kRefusedRetry.
  int run();
  // A launcher of a detached job may have ended (poold-agent's SIGCHLD): the loop reaps and reports
  // it now rather than at the next heartbeat. From any thread.
  void wakeForJobs();

  // The topology as last registered (the probed one, with NIC port states updated since).
  const topo::NodeTopology& topology() const;
  // The heartbeat the agent would send for `samples` (process owners read from /proc).
  pool::Heartbeat heartbeatOf(const NodeSamples& samples) const;

 private:
  struct State;
  std::unique_ptr<State> s_;
};

// Per process running on `gpus`, the lease its environment names: POOLRUN_LEASE=ID in
// PROC_ROOT/PID/environ, the first of them, where ID is a valid lease id (common::checkLeaseId). A
// process that is gone, unreadable or names none, or whose entry lies past the first
// kMaxEnvironBytes, has no entry. Cost: one open and read per distinct pid.
inline constexpr size_t kMaxEnvironBytes = size_t{1} << 20;
std::map<uint32_t, std::string> processLeases(const std::vector<topo::GpuSample>& gpus,
                                              const std::filesystem::path& proc_root);
std::optional<std::string> processLease(const std::filesystem::path& proc_root, uint32_t pid);
// Whether process `pid` is an MPS server (its name, PID/comm, is nvidia-cuda-mps-server cut to the
// kernel's 15 characters): on a GPU with shares it is the pool's, not a process outside the pool.
bool isMpsServer(const std::filesystem::path& proc_root, uint32_t pid);

// dcgm-exporter's HPC job-mapping files (its --hpc-job-mapping-dir): one file per GPU, named by
// its index ("0", "1", ...), holding the ids of the jobs on it, one a line. The agent's GPU index
// is the topology's (PCI order), which is NVML's and DCGM's order. A GPU that a lease holds has
// "LEASE\n"; a free one has no file. Each file is written whole under a temporary name
// (".INDEX.poold-agent.tmp", which dcgm-exporter does not read) and renamed into place.
class JobMappingFiles {
 public:
  JobMappingFiles(std::filesystem::path dir, size_t gpu_count);
  // Brings the files in line with `leases` (GPU index -> lease id; indexes past gpu_count are
  // ignored). Touches only files whose content changes, except on the first call, which also
  // removes the files of free GPUs that an earlier run left. Throws poolrun::Error kIo naming the
  // file; the files not done yet are done by the next call.
  void update(const std::map<size_t, std::string>& leases);
  const std::filesystem::path& dir() const { return dir_; }

 private:
  std::filesystem::path dir_;
  size_t gpu_count_;
  // Per GPU index, what its file holds as far as this object knows (nullopt: no file); an index
  // absent here is unknown and is written (or removed) on the next update.
  std::map<size_t, std::optional<std::string>> files_;
};

// Whether a sample says NVML no longer lists the GPU: an error, and not one reading (the sampler's
// sample of a GPU that fell off the bus). Only meaningful where NodeSamples::nvml_ok.
bool gpuLost(const topo::GpuSample& sample);

}  // namespace poolrun::agent
