#pragma once

// What crosses between a node agent (poold-agent) and poold: the registration of a node and its
// heartbeats, each a JSON document with a `schema`, and poold's reply to a heartbeat. Neither side
// reaches into the other: this header is the whole contract.
//
//   POST /v1/nodes/NAME/register   poolrun.node-registration/1   -> {"registered": NAME, ...}
//   POST /v1/nodes/NAME/heartbeat  poolrun.heartbeat/1           -> poolrun.heartbeat-reply/1
//
// A token of role `node` may send both for the node its token file names (the OWNER column), and
// nothing else; an administrator's token may send them for any node. Readers are strict, as for
// every client document (pool/json.hpp): an unknown field, a number out of range or a string that
// is not UTF-8 is refused naming the field.

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "poolrun/pool/client.hpp"
#include "poolrun/pool/limits.hpp"
#include "poolrun/topo/cluster.hpp"
#include "poolrun/topo/telemetry.hpp"

namespace poolrun::pool {

inline constexpr const char* kRegistrationSchema = "poolrun.node-registration/1";
inline constexpr const char* kHeartbeatSchema = "poolrun.heartbeat/1";
inline constexpr const char* kHeartbeatReplySchema = "poolrun.heartbeat-reply/1";

// Bounds of a heartbeat, against a broken or hostile agent.
inline constexpr size_t kMaxProcessesPerGpu = 4096;
inline constexpr size_t kMaxXidEventsPerGpu = 1024;
inline constexpr size_t kMaxNicPorts = 1024;
inline constexpr size_t kMaxVersionBytes = 128;  // "poold-agent 0.9.0"
inline constexpr size_t kMaxErrorBytes = 1024;   // a sample's error text
inline constexpr Range<uint32_t> kPidRange{1, 1u << 30};
inline constexpr size_t kMaxMigLayoutProfiles = 8;  // GPU instances in one layout (7 on an A100/H100)

struct NodeRegistration {
  topo::ClusterNode node;     // name, topology, switch, rail group, labels, fabric
  std::string agent_version;  // "poold-agent 0.9.0"
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
  // MIG layouts an administrator asked for (poolctl mig), per GPU index no lease holds any more:
  // the GPU instance profiles to make, in order. The agent makes them and says how it went in its
  // next heartbeat (Heartbeat::mig_results).
  std::map<size_t, std::vector<std::string>> mig_layouts;
  // The GPUs with MPS shares leased now: the agent keeps an MPS control daemon running for each
  // (and stops those it started for GPUs no longer listed).
  std::set<size_t> mps_gpus;
};

// The hash a heartbeat names its node's topology by: FNV-1a of the topology's JSON, without
// its `source` and `warnings` (which are the reader's, not the node's).
std::string topologyHash(const topo::NodeTopology& topology);

nlohmann::json toJson(const NodeRegistration& registration);
NodeRegistration nodeRegistrationFromJson(const nlohmann::json& doc);
nlohmann::json toJson(const Heartbeat& heartbeat);
// (poold reads heartbeats with heartbeatFromText, pool/src/heartbeat_reader.hpp.)
nlohmann::json toJson(const HeartbeatReply& reply);
// The same document as JSON text, written directly (poold writes one per heartbeat; the fields in
// another order than toJson(reply).dump()).
std::string heartbeatReplyText(const HeartbeatReply& reply);
HeartbeatReply heartbeatReplyFromJson(const nlohmann::json& doc);

// The agent's side of the protocol, over a poold's HTTP API. Errors are poolrun::Error: kIo where
// poold cannot be reached (the agent retries), PoolError kUnauthorized/kForbidden for a token poold
// refuses, kBadInput for a document it refuses.
class AgentLink {
 public:
  virtual ~AgentLink() = default;
  virtual void registerNode(const NodeRegistration& registration) = 0;
  virtual HeartbeatReply heartbeat(const Heartbeat& heartbeat) = 0;
  virtual std::string describe() const = 0;
};

// `uri` is http://HOST:PORT. Throws kBadInput for another kind of pool.
std::unique_ptr<AgentLink> openAgentLink(const std::string& uri, const std::string& token);

}  // namespace poolrun::pool
