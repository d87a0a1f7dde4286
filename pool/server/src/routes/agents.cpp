// The node agent's side (poolrun/pool/agent_protocol.hpp): a node registers, then heartbeats.

#include "poolrun/common/names.hpp"
#include "poolrun/pool/agent_protocol.hpp"
#include "poolrun/pool/heartbeat_reader.hpp"
#include "routes.hpp"
#include "server_core.hpp"

namespace poolrun::pool {
namespace {

using nlohmann::json;

// The address a registration came from, as a launch address's host: IPv6 in brackets, an
// IPv4-mapped one as IPv4.
std::string peerHost(const std::string& peer) {
  if (peer.starts_with("::ffff:") && peer.find('.') != std::string::npos) return peer.substr(7);
  return peer.find(':') != std::string::npos ? "[" + peer + "]" : peer;
}

json registerAgentNode(ServerCore& m, Context& c) {
  NodeRegistration r = nodeRegistrationFromJson(parseBody(c.req.body));
  if (r.node.name != c.params[0])
    throw badRequest("the registration names node '" + r.node.name + "', the path node '" +
                     common::printable(c.params[0]) + "'");
  if (r.launch.starts_with(":")) r.launch = peerHost(c.req.peer) + r.launch;
  r.topology_doc = topologyDoc(*r.node.topology);  // its serialization, outside the state's lock
  return m.mutate([&](PoolState& s, TimePoint now) {
    s.registerAgentNode(r, now);  // starts what its GPUs let start; no tick (O(nodes) each)
    return json{{"registered", r.node.name}, {"interval_s", m.opt.live.heartbeat_interval.count()}};
  });
}

// The heartbeat a request carries, for the node its path names.
Heartbeat readHeartbeat(const Context& c) {
  Heartbeat hb = heartbeatFromText(c.req.body);
  if (hb.node != c.params[0])
    throw badRequest("the heartbeat names node '" + hb.node + "', the path node '" +
                     common::printable(c.params[0]) + "'");
  return hb;
}

// A heartbeat that failed no GPU changed nothing the state file holds: its reply waits for no
// commit. A restart loses what heartbeats alone told: samples, foreign GPUs, idle clocks.
json takeHeartbeat(ServerCore& m, Context& c) {
  const Heartbeat hb = readHeartbeat(c);
  return json(heartbeatReplyText(m.mutate([&](PoolState& s, TimePoint now) { return s.heartbeat(hb, now); },
                                          CommittedState::Clean::kNothing)));
}

// On the network thread, where the state's lock is free (ServerCore::quick).
QuickBody quickHeartbeat(ServerCore& m, Context& c) {
  auto hb = std::make_shared<const Heartbeat>(readHeartbeat(c));
  auto change = m.tryMutate([hb](PoolState& s, TimePoint now) { return s.heartbeat(*hb, now, false); },
                            CommittedState::Clean::kNothing);
  if (!change) return {};  // the state's lock is busy: a worker waits for it
  if (!change->waits()) return json(heartbeatReplyText(change->settle()));
  return std::function<json()>(
      [change = std::move(*change)]() mutable { return json(heartbeatReplyText(change.settle())); });
}

// poold's public launch key (PEM), with which an agent checks the launch credentials it is shown.
json launchKey(ServerCore& m, Context&) {
  return json{{"key", m.launch_signer->publicKeyPem()}, {"key_id", m.launch_signer->keyId()}};
}

}  // namespace

std::vector<RouteSpec> agentRoutes() {
  return {
      {"GET", "/v1/nodes/*/launch-key", Role::kAgent, StateLock::kNone, "read the launch key", launchKey},
      {"POST", "/v1/nodes/*/register", Role::kAgent, StateLock::kChange, "register a node",
       registerAgentNode},
      {"POST", "/v1/nodes/*/heartbeat", Role::kAgent, StateLock::kChange, "send heartbeats", takeHeartbeat,
       "application/json", quickHeartbeat},
  };
}

}  // namespace poolrun::pool
