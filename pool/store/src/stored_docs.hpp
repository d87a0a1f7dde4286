#pragma once

// The JSON documents both stores keep (SQLite in a column, etcd as a key's value): a node's health
// and a queue entry. Leases are kept as toJson(Lease) (poolrun/pool/json.hpp).

#include <nlohmann/json.hpp>

#include "poolrun/pool/state.hpp"

namespace poolrun::pool {

// What the live pool keeps of a node across restarts:
//   {"agent": "poold-agent 0.9.0", "failures": {"3": {"reason": "...", "time_ms": 1764601445123}},
//    "ecc_acknowledged": {"3": 2}}
nlohmann::json healthToJson(const PoolNode& n);
void healthFromJson(const nlohmann::json& doc, PoolNode& n);

// A node's levels, those it has: {"nvlink_domain": "rack1", "spine": "s1"} (topo::kLevelFields).
nlohmann::json levelsDoc(const topo::NodeLevels& levels);
topo::NodeLevels levelsFromJson(const nlohmann::json& doc);

// {"ticket", "request", "enqueued_ms", "heartbeat_ms", "status", "lease", "reason"}
nlohmann::json queueDoc(const QueueEntry& e);
QueueEntry queueFromDoc(const nlohmann::json& doc);

// A remembered acquire request id's answer: {"lease", "ticket", "at_ms"}.
nlohmann::json requestDoc(const RememberedRequest& r);
RememberedRequest requestFromDoc(const nlohmann::json& doc);

// A join token (membership.hpp): {"hash", "created_by", "created_ms", "expires_ms"} and, once used,
// {"node", "credential", "used_ms"}. A node credential: {"node", "hash", "token", "joined_ms"} and,
// once revoked, {"revoked_by", "revoked_ms"}. Only hashes: never a token or credential itself.
nlohmann::json joinTokenDoc(const JoinToken& t);
JoinToken joinTokenFromDoc(const nlohmann::json& doc);
nlohmann::json credentialDoc(const NodeCredential& c);
NodeCredential credentialFromDoc(const nlohmann::json& doc);

}  // namespace poolrun::pool
