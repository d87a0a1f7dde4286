#pragma once

// What people and scripts see of a pool beyond leasing (poolctl): the inventory, the leases, the
// queue, and the administrator's commands. Every pool kind implements it.

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "poolrun/pool/client.hpp"
#include "poolrun/pool/quotas.hpp"
#include "poolrun/topo/telemetry.hpp"

namespace poolrun::pool {

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
  std::string switch_name;
  std::string rail_group;
  std::string fabric;  // "ib", "roce", "tcp"
  std::map<std::string, std::string> labels;
  NodeState state = NodeState::kUp;  // the administrator's state
  bool unreachable = false;          // its agent has gone quiet (shown as state "unreachable")
  std::string agent;                 // the agent's version; empty: registered without an agent
  std::optional<std::chrono::system_clock::time_point> last_heartbeat;
  std::vector<GpuInfo> gpus;
};

struct QueueInfo {
  int64_t ticket = 0;
  int position = 0;  // 1: the head
  std::string owner;
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

class PoolControl : public PoolClient {
 public:
  virtual PoolStatus status() = 0;
  virtual std::vector<NodeInfo> nodes() = 0;
  virtual std::vector<Lease> leases() = 0;
  virtual std::vector<QueueInfo> queue() = 0;
  virtual std::vector<QuotaUse> quotas() = 0;  // use against each quota (empty without quotas)
  // Administrator commands (PoolError kForbidden for a user).
  // Adds nodes, or updates the topology, switch and labels of known ones (keeping their state).
  virtual void registerNodes(const std::vector<topo::ClusterNode>& nodes) = 0;
  virtual void drain(const std::string& node) = 0;   // no new leases; existing ones run on
  virtual void resume(const std::string& node) = 0;  // back to up
  virtual void failGpu(const std::string& node, size_t index) = 0;
  // Asks for GPU `gpu` of `node` to be split into GPU instances of `profiles`, made by the node's
  // agent once no lease holds the GPU or its instances (PoolState::setMigLayout; docs/mig.md).
  virtual void setMigLayout(const std::string& node, size_t gpu,
                            const std::vector<std::string>& profiles) = 0;
  // The replicas and etcd's health; nullopt for a pool of one server (SQLite, the embedded pools).
  virtual std::optional<PoolReplicas> replicas() { return std::nullopt; }
};

// openPool() with the inventory and administration interface.
std::unique_ptr<PoolControl> openPoolControl(const std::string& uri, const ClientOptions& options = {});

// The state directory: options.state_dir, else $POOLRUN_STATE_DIR, else $XDG_STATE_HOME/poolrun,
// else ~/.local/state/poolrun. Created when missing.
std::string stateDirectory(const ClientOptions& options);

}  // namespace poolrun::pool
