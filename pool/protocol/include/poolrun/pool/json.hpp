#pragma once

// JSON forms of the pool's values, shared by poold's HTTP API, its client, the SQLite store and
// `poolctl --json`. Times are Unix milliseconds ("created_ms"). Readers (through common::JsonFields,
// as every JSON format of poolrun) throw poolrun::Error (kBadInput) naming the field, with its path,
// that is missing, of the wrong type or out of range:
//   "field 'gpus': 4294967297 is out of range (1 to 1000000)", "field 'gpus[2].index': 1.9 is not a
//   whole number (0 to 1023)", "missing field 'gpus'"
// Numbers must be JSON integers (not 1.0, true or "1") in the ranges of poolrun/pool/limits.hpp;
// names follow poolrun/common/names.hpp (node names and lease ids everywhere, since they end up in
// URLs, paths and hostfiles); every string must be UTF-8.
//
// What a client sends (requestFromJson, clusterNodeFromJson, registrationFromJson) is read
// strictly: an unknown field is refused with the list of known ones, strings hold no control
// characters and have a length limit (job names 256 bytes, labels 256). What the pool wrote itself
// (the other readers: poold's replies, stored rows) may carry fields a newer pool added.

#include <nlohmann/json.hpp>

#include "poolrun/pool/limits.hpp"
#include "poolrun/pool/quotas.hpp"
#include "poolrun/pool/reservations.hpp"
#include "poolrun/pool/types.hpp"

namespace poolrun::pool {

inline constexpr const char* kLeaseSchema = "poolrun.lease/1";

int64_t toMillis(TimePoint t);
TimePoint fromMillis(int64_t ms);

nlohmann::json toJson(
    const Lease& lease);  // {"schema","id","owner","job_name","gpus":[{"node","index"}],...}
Lease leaseFromJson(const nlohmann::json& doc);
nlohmann::json toJson(const LeaseRequest& request);
LeaseRequest requestFromJson(const nlohmann::json& doc);
// A request as the pool stored it (the queue in the state file): numbers are clamped into what the
// clock can hold rather than refused, since an older pool accepted more than clients may ask now.
LeaseRequest storedRequestFromJson(const nlohmann::json& doc);
nlohmann::json toJson(const PoolStatus& status);
PoolStatus statusFromJson(const nlohmann::json& doc);
nlohmann::json toJson(const NodeInfo& node);
NodeInfo nodeInfoFromJson(const nlohmann::json& doc);
nlohmann::json toJson(const QueueInfo& entry);
QueueInfo queueInfoFromJson(const nlohmann::json& doc);
nlohmann::json toJson(const QuotaUse& use);
QuotaUse quotaUseFromJson(const nlohmann::json& doc);
// A node with its topology (poolrun.topology/1), for registration and PoolClient::node().
nlohmann::json toJson(const topo::ClusterNode& node);
topo::ClusterNode clusterNodeFromJson(const nlohmann::json& doc);
// The body of POST /v1/nodes: {"nodes": [node, ...]}; errors name the node's place ("nodes[3]: ...").
std::vector<topo::ClusterNode> registrationFromJson(const nlohmann::json& doc);
// The body of POST /v1/nodes/NAME/gpus/G/mig: {"profiles": ["3g.40gb", "3g.40gb"]}, 1 to
// kMaxMigLayoutProfiles profile names (docs/mig.md).
std::vector<std::string> migLayoutFromJson(const nlohmann::json& doc);

// A reservation (reservations.hpp), as GET /v1/reservations lists it and the stores keep it:
// {"name", "nodes": [...], "start_ms", "end_ms", "users": [...], "accounts": [...], "created_by",
// "created_ms", "drained"}.
nlohmann::json toJson(const Reservation& r);
Reservation reservationFromJson(const nlohmann::json& doc);

}  // namespace poolrun::pool
