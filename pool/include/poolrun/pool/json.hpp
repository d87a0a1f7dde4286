#pragma once

// JSON forms of the pool's values, shared by poold's HTTP API, its client, the SQLite store and
// `poolctl --json`. Times are Unix milliseconds ("created_ms"). Readers throw poolrun::Error
// (kBadInput) naming the field that is missing or of the wrong type.

#include <nlohmann/json.hpp>

#include "poolrun/pool/client.hpp"
#include "poolrun/pool/control.hpp"
#include "poolrun/pool/state.hpp"

namespace poolrun::pool {

inline constexpr const char* kLeaseSchema = "poolrun.lease/1";

int64_t toMillis(TimePoint t);
TimePoint fromMillis(int64_t ms);

nlohmann::json toJson(
    const Lease& lease);  // {"schema","id","owner","job_name","gpus":[{"node","index"}],...}
Lease leaseFromJson(const nlohmann::json& doc);
nlohmann::json toJson(const LeaseRequest& request);
LeaseRequest requestFromJson(const nlohmann::json& doc);
nlohmann::json toJson(const PoolStatus& status);
PoolStatus statusFromJson(const nlohmann::json& doc);
nlohmann::json toJson(const NodeInfo& node);
NodeInfo nodeInfoFromJson(const nlohmann::json& doc);
nlohmann::json toJson(const QueueInfo& entry);
QueueInfo queueInfoFromJson(const nlohmann::json& doc);
// A node with its topology (poolrun.topology/1), for registration and PoolClient::node().
nlohmann::json toJson(const topo::ClusterNode& node);
topo::ClusterNode clusterNodeFromJson(const nlohmann::json& doc);

}  // namespace poolrun::pool
