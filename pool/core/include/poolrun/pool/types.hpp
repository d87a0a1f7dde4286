#pragma once

// The pool's values, what every layer of pool/ speaks in: what a lease request asks for and what a
// lease holds (GpuRef, LeaseRequest, Lease), why a pool refused (PoolFailure, PoolError), what
// people and scripts see of the pool (NodeInfo, GpuInfo, QueueInfo, PoolStatus, PoolReplicas), and
// what a node's agent tells poold (NodeRegistration, Heartbeat, HeartbeatReply). Values only: the
// rules that change them are PoolState's (state.hpp), their JSON the protocol's (json.hpp,
// agent_protocol.hpp).

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "poolrun/common/error.hpp"
#include "poolrun/topo/cluster.hpp"
#include "poolrun/topo/telemetry.hpp"
#include "poolrun/topo/topology.hpp"

namespace poolrun::pool {

using TimePoint = std::chrono::system_clock::time_point;
inline constexpr TimePoint kNever = TimePoint::max();

// A unit of a lease: a whole GPU, a MIG compute instance (poolrun --mig), or an MPS share of a GPU
// (poolrun --share, --gpu-memory).
struct GpuRef {
  std::string node;
  // A whole GPU or a share: the GPU's index in its node's NodeTopology. A MIG instance: the pool's
  // unit number, gpus.size() + k for the k-th of topo::migUnits (its GPU and instance).
  size_t index = 0;
  std::string mig{};  // a MIG instance: its "MIG-..." UUID (what CUDA_VISIBLE_DEVICES takes); empty: a GPU
  // An MPS share: the percentage of the GPU's SMs its client may use (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE;
  // 0: not limited) and the device memory it may pin (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT; 0: not
  // limited). Other leases may hold shares of the same GPU.
  int share_percent{};
  uint64_t share_memory{};
  bool share{};
  bool operator==(const GpuRef&) const = default;
  auto operator<=>(const GpuRef&) const = default;
};

// "n01:0-3,6 n02:0-7": GPUs (sorted by node, then index) in the compact form people read; a MIG
// instance is "n03:MIG-<uuid>", an MPS share "n04:2(25% 20 GiB)".
std::string formatGpus(const std::vector<GpuRef>& gpus);

struct LeaseRequest {
  int gpus = 0;
  int gpus_per_node = 0;  // 0: any split
  bool whole_nodes = false;
  std::string gpu_model;  // substring of the GPU model, empty: any
  uint64_t min_memory_bytes = 0;
  std::optional<topo::Fabric> fabric;
  std::map<std::string, std::string> labels;  // every label must match
  // Nodes it must not be placed on (poolrun --exclude, and a job restarted after a node failed:
  // poolrun --retries); at most kMaxExcludedNodes.
  std::set<std::string> exclude_nodes;
  bool one_switch = false;  // all nodes under one leaf switch
  // --placement strict: wait rather than spread over more NVLink domains, blocks, leaves or spines
  // than the pool could place it in were it empty (docs/placement.md); else best effort.
  bool topology_strict = false;
  int priority = 0;  // higher first
  std::string owner;
  // The account charged (poolrun --account, docs/fairshare.md): where the pool has an accounts
  // file, the pool sets it at submit (the owner's default where empty); empty without one.
  std::string account;
  // A reservation to lease inside (poolrun --reservation, docs/reservations.md): only its nodes,
  // only inside its window, the lease ending with it. Empty: anywhere a reservation does not keep.
  std::string reservation;
  std::string job_name;
  std::optional<std::chrono::seconds> wait;  // nullopt: wait while the pool could ever satisfy it
  std::chrono::seconds ttl{60};
  std::optional<std::chrono::seconds> max_duration;
  bool no_reclaim = false;  // never reclaimed when idle (poold --reclaim-idle); administrators only
  // May be preempted by a waiting request of higher priority (after the pool's grace period). A
  // lease whose owner is over quota may be preempted whatever this says.
  bool preemptible = false;
  // Elastic (poolrun -n MIN:MAX): `gpus` is the least the lease holds, granted all or nothing;
  // max_gpus the most it grows to, while GPUs are free and nobody of equal or higher priority
  // waits. A request of higher priority shrinks it back towards `gpus` instead of preempting it.
  // 0: a lease of a fixed size. Not with whole_nodes; a multiple of gpus_per_node where given.
  int max_gpus = 0;
  // MIG (poolrun --mig PROFILE): `gpus` MIG compute instances of this profile ("1g.10gb", as
  // `nvidia-smi -L` names them) instead of whole GPUs, packed onto as few GPUs as possible. Not with
  // whole_nodes, gpus_per_node or max_gpus. Empty: whole GPUs.
  std::string mig_profile;
  // PROFILE+: an instance with at least the profile's SMs and memory will do (the smallest first).
  bool mig_or_larger = false;
  bool mig() const { return !mig_profile.empty(); }
  // An MPS share per rank (poolrun --share FRACTION, --gpu-memory BYTES): `gpus` shares, each on
  // a GPU of its own (NCCL takes one rank per GPU in a communicator), run by the node's MPS control
  // daemon. share_percent: the share of the GPU's SMs, 1 to 100 (0: not limited, counted as none);
  // share_memory_bytes: the device memory it may pin (0: share_percent of the GPU's memory). The
  // shares of one GPU belong to one owner (MPS serves one user's clients at a time) and add up to at
  // most 100 percent, the GPU's memory and kMaxMpsClients clients. Not with mig_profile,
  // whole_nodes, gpus_per_node or max_gpus.
  int share_percent = 0;
  uint64_t share_memory_bytes = 0;
  bool shared() const { return share_percent > 0 || share_memory_bytes > 0; }
  // The least time between the lease's creation or last change of size and its next growth: each
  // one restarts the job.
  std::chrono::seconds resize_interval{600};
  bool elastic() const { return max_gpus > 0; }
  bool operator==(const LeaseRequest&) const = default;
};

struct Lease {
  std::string id;
  std::string owner;
  std::string account;  // see LeaseRequest
  std::string job_name;
  std::vector<GpuRef> gpus;  // sorted by node (pool order), then index
  int priority = 0;
  std::chrono::system_clock::time_point created;
  std::chrono::system_clock::time_point expires;
  std::chrono::seconds ttl{60};                                  // what a renewal extends the lease by
  std::optional<std::chrono::system_clock::time_point> max_end;  // created + max_duration
  // Variables the job's launcher must set for the job to run inside the lease (Slurm: the
  // allocation's SLURM_* variables where poolrun made the allocation); empty for other pools.
  std::map<std::string, std::string> env;
  bool no_reclaim = false;   // see LeaseRequest
  bool preemptible = false;  // see LeaseRequest
  // The time a preempted lease's holder has between the notice and the end (the pool's
  // --preempt-grace); zero where the pool never preempts.
  std::chrono::seconds preempt_grace{0};
  // Set once the pool has chosen the lease as a victim: the job must end by preempt_at, when the
  // pool ends the lease; preempt_reason says for whom ("ticket 12 of bob, priority 10, needs ...").
  std::optional<std::chrono::system_clock::time_point> preempt_at;
  std::string preempt_reason;
  int64_t preempted_for = 0;  // the queue ticket it was preempted for

  // Elastic leases: the request it was granted for (its bounds, gpus to max_gpus, and the shape it
  // grows and shrinks in), and what the pool did to its size.
  std::optional<LeaseRequest> elastic;
  int resizes = 0;  // how often the pool has changed its GPUs: a holder restarts its job on a change
  std::chrono::system_clock::time_point resized;  // the last change; `created` where none
  // A shrink under notice: the pool takes `shrink_gpus` back at shrink_at (the job must have left
  // them by then: it is restarted on the others), or earlier when the holder calls
  // PoolClient::shrink. shrink_reason says for whom, as preempt_reason does.
  std::vector<GpuRef> shrink_gpus;
  std::optional<std::chrono::system_clock::time_point> shrink_at;
  std::string shrink_reason;
  int64_t shrunk_for = 0;  // the queue ticket it shrinks for

  // What the pool tells the holder in a renewal's reply and in listings (not stored):
  std::vector<std::string> at_risk_nodes;  // nodes of the lease whose agent has gone quiet
  std::optional<std::chrono::system_clock::time_point> idle_since;  // idle: GPUs unused since then
  std::optional<std::chrono::system_clock::time_point> reclaim_at;  // when the pool ends it as idle
};

// Why a pool call failed, where the caller acts on the reason (poolctl maps it to exit status).
enum class PoolFailure {
  kOther,         // see Error::code()
  kNeverFits,     // the pool can never satisfy the request as it stands (failed GPUs, too few nodes)
  kTimeout,       // the request did not fit within LeaseRequest::wait
  kUnauthorized,  // 401: no token, or one the pool does not know
  kForbidden,     // 403: the token's owner or role may not do this
  kGone,          // renew of a lease that expired, was released or never existed
  kInterrupted,   // a signal (PoolError::signal()) ended a queued wait; the request was withdrawn
};

// A poolrun::Error with the reason a pool refused; thrown by every PoolClient.
class PoolError : public Error {
 public:
  PoolError(PoolFailure failure, ErrorCode code, const std::string& message, int position = 0, int signal = 0)
      : Error(code, message), failure_(failure), position_(position), signal_(signal) {}
  PoolFailure failure() const noexcept { return failure_; }
  int position() const noexcept { return position_; }  // kTimeout: the last queue position
  int signal() const noexcept { return signal_; }      // kInterrupted: the signal's number

 private:
  PoolFailure failure_;
  int position_;
  int signal_;
};

enum class NodeState { kUp, kDraining, kDown };
// kForeign: running compute processes of no lease (seen by the node's agent); never placed.
// kMig: in MIG mode (or switching to it at the next reset): its MIG instances are the units, and no
// whole-GPU request takes it.
enum class GpuState { kFree, kLeased, kFailed, kForeign, kMig };
std::string toString(NodeState state);
std::string toString(GpuState state);
// "free", "leased", "failed", "foreign", "mig"; anything else reads as free (a newer pool's state).
GpuState gpuStateFromString(std::string_view text);
// "up", "draining", "down"; throws poolrun::Error (kBadInput) naming the text otherwise.
NodeState nodeStateFromString(std::string_view text);

// A MIG compute instance of a GPU in MIG mode: a unit the pool leases (poolrun --mig).
struct MigInstanceInfo {
  size_t unit = 0;  // the pool's unit number: GpuRef::index in a lease holding it
  int gpu_instance = 0;
  int compute_instance = 0;
  std::string profile;  // "1g.10gb", as nvidia-smi -L names it
  std::string uuid;     // "MIG-..."
  int sm = 0;
  uint64_t memory_bytes = 0;
  GpuState state = GpuState::kFree;  // free, leased, or failed / foreign with its GPU
  std::string lease;                 // where leased
};

struct GpuInfo {
  size_t index = 0;
  std::string pci;  // "0000:18:00.0"
  std::string uuid;
  std::string model;
  uint64_t memory_bytes = 0;
  GpuState state = GpuState::kFree;
  std::string lease;          // the lease holding it, where leased (a failed GPU may still be held)
  std::string failed_reason;  // kFailed: why ("XID 79 (fallen off the bus)")
  std::optional<std::chrono::system_clock::time_point> failed_at;
  // From the node's agent, where it has one (the last heartbeat's sample):
  std::optional<double> utilization;  // 0 to 1, SM activity
  std::optional<uint64_t> memory_used_bytes;
  std::optional<uint64_t> memory_total_bytes;
  std::optional<double> temperature_c;
  std::optional<double> power_w;
  std::string sample_error;  // what the sample could not read: NVML's error (a GPU it no longer lists)
  std::vector<topo::GpuProcess> foreign_processes;  // kForeign: the processes of no lease
  std::vector<MigInstanceInfo> mig_instances;       // kMig: its compute instances, by unit
  std::vector<std::string> mig_layout;              // a MIG layout asked for (poolctl mig) and not made yet
  // An MPS-shared GPU (state leased, `lease` the first): every lease with a share of it.
  struct Share {
    std::string lease;
    int percent = 0;            // of its SMs; 0: not limited
    uint64_t memory_bytes = 0;  // 0: not limited
  };
  std::vector<Share> shares{};
};

struct NodeInfo {
  std::string name;
  topo::NodeLevels levels;
  std::string fabric;  // "ib", "roce", "tcp"
  std::map<std::string, std::string> labels;
  NodeState state = NodeState::kUp;  // the administrator's state
  std::string drain_reason;          // where its agent's health checks drained it: what failed
  bool unreachable = false;          // its agent has gone quiet (shown as state "unreachable")
  std::string agent;                 // the agent's version; empty: registered without an agent
  std::optional<std::chrono::system_clock::time_point> last_heartbeat;
  std::vector<GpuInfo> gpus;
};

// A waiting request's multi-factor priority (docs/fairshare.md): each factor as the pool computed it
// at its last scheduling pass, and the weighted sum that orders the queue.
struct PriorityFactors {
  double priority = 0;   // the request's --priority
  double fairshare = 0;  // 0 to 1: its owner's in its account
  double age = 0;        // 0 to 1: its wait over the weights' max_age
  double size = 0;       // 0 to 1: its GPUs over the pool's
  double score = 0;      // the weighted sum
  bool operator==(const PriorityFactors&) const = default;
};

struct QueueInfo {
  int64_t ticket = 0;
  int position = 0;  // 1: the head
  std::string owner;
  std::string account;
  std::optional<PriorityFactors> factors;  // where the pool has an accounts file
  std::string job_name;
  int gpus = 0;
  int priority = 0;
  std::chrono::system_clock::time_point enqueued;
  std::string reason;  // why it cannot start now (PoolState::waitReason)
  std::optional<std::chrono::system_clock::time_point> planned_start;  // where the scheduler has one
};

struct PoolStatus {
  int nodes_up = 0, nodes_draining = 0, nodes_down = 0;
  int nodes_unreachable = 0;  // also counted in their administrator's state
  int gpus_free = 0, gpus_leased = 0, gpus_failed = 0, gpus_foreign = 0, gpus_mig = 0;
  int gpus_unreachable = 0;  // on unreachable nodes; also counted in their own state
  // MIG compute instances (of GPUs in MIG mode): free, leased, and unusable with their GPU (failed,
  // busy outside the pool).
  int mig_free = 0, mig_leased = 0, mig_unusable = 0;
  // MPS: GPUs with shares (counted as leased too), and the shares leased on them.
  int gpus_shared = 0, mps_shares = 0;
  int leases = 0;
  int queued = 0;
  uint64_t leases_granted = 0;  // since the pool was created
};

// The replicas of a pool whose poold keeps its state in etcd (docs/ha.md): who leads, who stands
// by, and the health of etcd's members as the leader sees them.
struct PoolReplicas {
  struct Replica {
    std::string url;  // as it advertises itself
    bool leader = false;
  };
  struct EtcdMember {
    std::string endpoint;
    bool reachable = false;
    bool leader = false;  // etcd's own raft leader
    std::string version;
    std::string error;  // where not reachable
  };
  std::string store;  // "etcd://HOST:PORT,... (prefix /poolrun)"
  std::vector<Replica> replicas;
  std::vector<EtcdMember> etcd;
};

struct NodeRegistration {
  topo::ClusterNode node;     // name, topology, switch, rail group, labels, fabric
  std::string agent_version;  // "poold-agent 0.9.0"
  // Where its agent starts jobs' daemons (docs/launch.md): "HOST:PORT"; ":PORT" for the address
  // the registration came from; empty where it does not.
  std::string launch = {};
  // topologyDoc(*node.topology) where the caller worked it out already (poold does, before it
  // takes its state's lock); empty: worked out as the node registers.
  std::string topology_doc = {};
};

struct Heartbeat {
  std::string node;
  std::string agent_version;
  std::chrono::system_clock::time_point time;  // when the agent sent it (its clock)
  // topo::topologyHash of the topology the agent registered: where poold holds another, the reply
  // asks the agent to register again.
  std::string topology_hash;
  std::vector<topo::GpuSample> gpus;  // index set: a GPU of the node's topology
  std::vector<topo::NicPortSample> nics;
  // Per process on the node's GPUs, the lease its environment names (POOLRUN_LEASE), where the
  // agent found one; a process absent here belongs to no poolrun job.
  std::map<uint32_t, std::string> process_leases;
  // MIG layouts poold asked for (HeartbeatReply::mig_layouts) that the agent tried since its last
  // heartbeat: per GPU index, "" where the layout is made, else what failed.
  std::map<size_t, std::string> mig_results;
  // MPS control daemons poold asked for (HeartbeatReply::mps_gpus) that the agent could not start
  // since its last heartbeat: per GPU index, what failed.
  std::map<size_t, std::string> mps_errors;
  // The agent's health checks (the doctor's node checks, poold-agent --health-interval): nullopt
  // where it runs none (or none yet), "" where the last passed, else what failed (each FAIL's check,
  // subject and evidence, "; " between). A change drains the node, or resumes one its agent drained.
  std::optional<std::string> health_failure;
};

// Where the MPS control daemon of GPU `gpu` of a node listens (its CUDA_MPS_PIPE_DIRECTORY):
// DIR/gpuN, DIR being poold-agent's --mps-dir and poolrun's $POOLRUN_MPS_DIR, by default
// kDefaultMpsDirectory. The agent starts the daemon there; the planner gives its clients the same.
inline constexpr const char* kDefaultMpsDirectory = "/run/poolrun/mps";
inline std::filesystem::path mpsPipeDirectory(const std::filesystem::path& dir, size_t gpu) {
  return dir / ("gpu" + std::to_string(gpu));
}

struct HeartbeatReply {
  bool register_again = false;       // poold does not know the node, or holds another topology
  std::chrono::seconds interval{5};  // how often poold expects heartbeats
  // Per GPU index, the lease that holds it now (for the dcgm-exporter job-mapping files).
  std::map<size_t, std::string> gpu_leases;
  // Every lease that holds something on the node now: whole GPUs, MIG instances, MPS shares. The
  // agent ends the cgroup of a lease not listed in the reply to a heartbeat sent after the cgroup
  // was made (the lease has ended: released, expired, preempted, cancelled). nullopt from a poold
  // that does not send it: the agent then ends no lease by it.
  std::optional<std::set<std::string>> leases;
  // MIG layouts an administrator asked for (poolctl mig), per GPU index no lease holds any more:
  // the GPU instance profiles to make, in order. The agent makes them and says how it went in its
  // next heartbeat (Heartbeat::mig_results).
  std::map<size_t, std::vector<std::string>> mig_layouts;
  // The GPUs with MPS shares leased now: the agent keeps an MPS control daemon running for each
  // (and stops those it started for GPUs no longer listed).
  std::set<size_t> mps_gpus;
  // Detached jobs have work for the agent (launchers to start or signal): it asks for it with
  // GET /v1/nodes/NAME/jobs.
  bool jobs = false;
};

// The hash a heartbeat names its node's topology by: FNV-1a of topologyDoc, the topology's JSON
// without its `source` and `warnings` (which are the reader's, not the node's).
std::string topologyDoc(const topo::NodeTopology& topology);
std::string topologyHash(const topo::NodeTopology& topology);

// Who makes a request of the pool, as poold knows it from the request's credential (a token of its
// token file), or as an embedded pool's caller says: the owner its leases are held under, and its
// role.
struct Caller {
  std::string owner;  // role node: the node's name
  bool admin = false;
  bool node = false;          // a node agent: registers and heartbeats its own node, nothing else
  std::string via = "token";  // how poold knew it: "token", "munge", "credential" or "job"
  // A detached job's launcher (via "job"): its owner's rights on this lease alone, while it runs.
  std::string job_lease = {};
  // "admin", "node" or "user".
  const char* role() const { return admin ? "admin" : node ? "node" : "user"; }
};

// A fresh lease id: "L" and 16 random hex digits.
std::string newLeaseId();

}  // namespace poolrun::pool
