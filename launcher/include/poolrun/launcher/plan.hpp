#pragma once

// The binding planner: given the GPUs a job holds on each node and each node's NodeTopology, it
// decides every rank's node, local rank, GPU, NIC(s), cores, memory node, GPUDirect RDMA setting
// and environment, so that NCCL, UCX and Open MPI use the hardware the way it is wired.
//
// Planning is pure: no I/O, no clock, the same inputs give the same plan. Requests that cannot be
// met throw poolrun::Error (kBadInput) saying why, before anything starts.

#include <chrono>
#include <filesystem>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "poolrun/pool/agent_protocol.hpp"
#include "poolrun/topo/cluster.hpp"
#include "poolrun/topo/topology.hpp"

namespace poolrun::launcher {

enum class GdrMode { kAuto, kOn, kOff };
std::string toString(GdrMode mode);
GdrMode gdrModeFromString(std::string_view text);  // auto | on | off

// Which of NCCL's network transports carries a rank's traffic to other nodes, as the plan sets
// NCCL up. It decides whether GPUDirect RDMA can apply at all.
enum class NetTransport {
  kIbVerbs,    // NCCL's IB transport (InfiniBand, RoCE): NCCL_IB_*, GPUDirect RDMA by path and --gdr
  kSocket,     // NCCL's socket transport (fabric tcp): never GPUDirect RDMA
  kOfiPlugin,  // AWS EFA: only through the aws-ofi-nccl net plugin, which decides GPUDirect RDMA
  kNone,       // no usable NIC on the node
};
std::string toString(NetTransport transport);  // "ib", "socket", "ofi-plugin", "none"

// The GPUs a job holds on one node (indexes into the node topology's gpus).
// An MPS share of a GPU (poolrun --share, --gpu-memory): what its one client may use of it.
struct MpsShare {
  int percent = 0;            // of the GPU's SMs (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE); 0: not limited
  uint64_t memory_bytes = 0;  // device memory it may pin (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT); 0: not limited
  bool operator==(const MpsShare&) const = default;
};

struct NodeGrant {
  const topo::ClusterNode* node = nullptr;
  std::vector<size_t> gpus;  // indexes into the node's topology
  // MIG instances (poolrun --mig): per entry of `gpus` (the GPU each instance is part of, which may
  // repeat), the instance's "MIG-..." UUID, which the rank gets as CUDA_VISIBLE_DEVICES. Empty: whole
  // GPUs.
  std::vector<std::string> mig{};
  // MPS shares (poolrun --share): per GPU of `gpus` held as a share, what its rank may use; the rank
  // is a client of that GPU's MPS control daemon. Absent: the GPU is the rank's alone.
  std::map<size_t, MpsShare> shares{};
};

struct PlanRequest {
  int ranks = 0;
  int gpus_per_node = 0;               // 0: every GPU each node grants
  std::optional<topo::Fabric> fabric;  // nullopt: the best fabric every node has
  GdrMode gdr = GdrMode::kAuto;
  std::optional<int> roce_tc;                        // NCCL_IB_TC for RoCE
  std::map<std::string, std::string> user_env;       // variables the user set; they always win
  std::string mps_dir = pool::kDefaultMpsDirectory;  // where the nodes' MPS control daemons listen
};

struct NicChoice {
  std::string name;  // RDMA device (mlx5_3) or the topology's label (pci:..., eth0)
  int port = 1;
  std::string netdev;
  topo::LinkLayer link_layer = topo::LinkLayer::kUnspecified;
  std::optional<int> roce_v2_gid_index;
  double rate_gbps = 0;
  bool verbs = false;  // InfiniBand or RoCE through ibverbs: NCCL_IB_* and UCX apply
  bool efa = false;    // AWS EFA (topo::Nic::isEfa): NCCL needs the aws-ofi-nccl plugin
};

struct RankPlan {
  int rank = 0;
  size_t node_index = 0;  // into JobPlan::nodes
  int local_rank = 0;
  int local_size = 0;
  size_t gpu = 0;                 // index in the node topology (PCI bus order)
  int cuda_index = 0;             // CUDA device index with CUDA_DEVICE_ORDER=PCI_BUS_ID (NVIDIA GPUs only)
  std::string mig;                // the MIG instance's UUID where the rank has one (of GPU `gpu`), else empty
  std::optional<MpsShare> share;  // an MPS share of GPU `gpu` (CUDA_MPS_* variables), else the GPU whole
  topo::PciAddress gpu_pci;
  std::vector<NicChoice> nics;
  topo::Path gpu_nic_path;                       // to the first NIC
  NetTransport transport = NetTransport::kNone;  // of the first NIC
  // NCCL uses GPUDirect RDMA as planned. Always false unless `transport` is kIbVerbs: sockets never
  // do, and over EFA the plugin decides (gdr_reason says which; the table shows n/a or plugin).
  bool gdr = false;
  std::string gdr_reason;
  int numa = topo::kNone;
  topo::CpuSet cpuset;
  bool shares_cpus = false;    // more ranks than CPUs in its domain
  std::string rankfile_slots;  // logical core (or hardware thread) indexes for the rankfile
  std::vector<std::pair<std::string, std::string>> env;  // what the rank gets, in a fixed order
  std::map<std::string, std::string> user_won;           // variable -> the value the plan wanted
  std::vector<std::string> notes;
};

struct NodePlan {
  std::string name;
  topo::ClusterNode node;  // a copy: the plan does not depend on the cluster outliving it
  int first_rank = 0;
  int ranks = 0;
};

struct JobPlan {
  topo::Fabric fabric = topo::Fabric::kTcp;
  std::vector<NodePlan> nodes;
  std::vector<RankPlan> ranks;
  bool hwthread_slots = false;  // rankfile slots are hardware threads (--use-hwthread-cpus / :HWTCPUS)
  std::vector<std::string> notes;

  const NodePlan& nodeOf(const RankPlan& r) const { return nodes[r.node_index]; }
};

// Plans `request.ranks` ranks on the grants (every granted GPU gets one rank, in grant order of
// nodes after the leaf-switch ordering). Throws poolrun::Error on requests that cannot be met.
JobPlan makePlan(const std::vector<NodeGrant>& grants, const PlanRequest& request);

// Without a pool (`poolrun plan`): takes `gpus_per_node` (or all) GPUs of the cluster's nodes in
// leaf-switch order until `ranks` are placed, the best-connected GPUs of a node first.
std::vector<NodeGrant> grantFromCluster(const topo::Cluster& cluster, const PlanRequest& request);
// makePlan on grantFromCluster's grants: the plan `poolrun plan` makes of a cluster file.
JobPlan planOnCluster(const topo::Cluster& cluster, const PlanRequest& request);

// The "poolrun.plan/1" document.
nlohmann::ordered_json planToJson(const JobPlan& plan);
// The table `poolrun plan` prints.
std::string planTable(const JobPlan& plan);
// An Open MPI rankfile ("rank N=HOST slot=LIST"): the same text for 4.1 and 5.x.
std::string rankfile(const JobPlan& plan);

// What a job of several ranks on MIG instances is told of NCCL over them (a plan note, and a line
// `poolrun` prints before it starts such a job).
std::string migNcclNote();

// The variables the planner may set (so that callers can tell which user variables matter).
const std::vector<std::string>& plannedVariables();

// The planned variables poolrun's own environment (the user's shell) has and that `exports` (-x
// VAR or VAR=VALUE, as given) does not name, with their values. They never override the plan: a
// CUDA_VISIBLE_DEVICES=3 left in a shell would put every rank on a GPU the lease does not hold.
std::vector<std::pair<std::string, std::string>> shellPlannedVariables(
    const std::vector<std::string>& exports);

// "the plan sets ...; your shell's ... are not used ...": the note poolrun prints once for the
// variables of `shell` that the plan sets for some rank to another value; "" where there is none.
std::string ignoredShellVariablesNote(const JobPlan& plan,
                                      const std::vector<std::pair<std::string, std::string>>& shell);

// Throws poolrun::Error (kBadInput) where the user's CUDA_VISIBLE_DEVICES (-x) names, for a rank, a
// GPU that is not among those the plan gives the ranks of its node (the lease's): by CUDA index,
// GPU UUID or MIG instance UUID. `what` names the grant in the message ("lease L12").
void checkUserGpusWithinPlan(const JobPlan& plan, const std::string& what);

}  // namespace poolrun::launcher
