#pragma once

// What crosses between a node agent (poold-agent) and poold: the registration of a node and its
// heartbeats, each a JSON document with a `schema`, and poold's reply to a heartbeat. Neither side
// reaches into the other: this header is the whole contract.
//
//   POST /v1/nodes/NAME/register   poolrun.node-registration/1   -> {"registered": NAME, ...}
//   POST /v1/nodes/NAME/heartbeat  poolrun.heartbeat/1           -> poolrun.heartbeat-reply/1
//   POST /v1/nodes/NAME/join       {"token": JOIN TOKEN, "credential": CREDENTIAL} -> {"joined": NAME}
//   GET  /v1/nodes/NAME/jobs       -> the detached jobs to start and signal (job_json.hpp), asked
//                                  where a heartbeat's reply says `jobs`
//   POST /v1/nodes/NAME/jobs/ID    a job's launcher started, was signalled, ended (job_json.hpp)
//
// A node that joins (docs/pool.md, "Nodes that join") sends a join token an administrator made
// (`poolctl node-token create`) with a credential it made itself, once; poold keeps the credential's
// SHA-256, and the credential is then the node's token (of role node) until it is revoked.
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
#include <string_view>
#include <vector>

#include "poolrun/pool/limits.hpp"
#include "poolrun/pool/types.hpp"

namespace poolrun::pool {

inline constexpr const char* kRegistrationSchema = "poolrun.node-registration/1";
inline constexpr const char* kHeartbeatSchema = "poolrun.heartbeat/1";
inline constexpr const char* kHeartbeatReplySchema = "poolrun.heartbeat-reply/1";

// A join token is kJoinTokenPrefix and 64 hex digits; a node credential kNodeCredentialPrefix and 64.
inline constexpr std::string_view kJoinTokenPrefix = "pj-";
inline constexpr std::string_view kNodeCredentialPrefix = "pn-";
// The credential a detached job's launcher renews its lease with (GET /v1/nodes/NAME/jobs gives it):
// kJobCredentialPrefix and 64 hex digits.
inline constexpr std::string_view kJobCredentialPrefix = "pr-";
// Whether `text` is `prefix` and 64 lower-case hex digits.
bool isSecretOf(std::string_view prefix, std::string_view text);

// "" where `address` is where an agent starts jobs' daemons: HOST:PORT, HOST a name or an IPv4
// address or a [bracketed] IPv6 one (empty in a registration: its sender's), PORT 1 to 65535;
// else what is wrong with it.
std::string launchAddressProblem(const std::string& address);

nlohmann::json toJson(const NodeRegistration& registration);
NodeRegistration nodeRegistrationFromJson(const nlohmann::json& doc);
nlohmann::json toJson(const Heartbeat& heartbeat);
// (poold reads heartbeats with heartbeatFromText, pool/src/heartbeat_reader.hpp.)
nlohmann::json toJson(const HeartbeatReply& reply);
// The same document as JSON text, written directly (poold writes one per heartbeat; the fields in
// another order than toJson(reply).dump()).
std::string heartbeatReplyText(const HeartbeatReply& reply);
HeartbeatReply heartbeatReplyFromJson(const nlohmann::json& doc);

}  // namespace poolrun::pool
