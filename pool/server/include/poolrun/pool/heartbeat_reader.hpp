#pragma once

// poold's reader of heartbeats (poolrun.heartbeat/1, pool/agent_protocol.hpp), apart from the
// protocol's other readers: it streams the request body through simdjson's On-Demand parser
// straight into the Heartbeat, without a DOM, since poold reads one per node every few seconds
// (at 12,500 nodes, 2,500 a second). Only poold links it (simdjson is a shared C++ library, which
// poolrun's launch path does without).

#include <string_view>

#include "poolrun/pool/agent_protocol.hpp"

namespace poolrun::pool {

// The rules and messages of every client document (JsonFields): an unknown field is refused, null
// counts as absent, each value is checked for its type and range, and a failure (poolrun::Error,
// kBadInput) names the field with its path ("field 'gpus[2].index': ...").
Heartbeat heartbeatFromText(std::string_view body);

}  // namespace poolrun::pool
