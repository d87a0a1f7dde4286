// /v1/nodes...: the pool's nodes, and an administrator's changes to them (register, drain, resume,
// fail GPUs, MIG layouts).

#include "poolrun/pool/json.hpp"
#include "poolrun/pool/limits.hpp"
#include "poolrun/pool/service.hpp"
#include "routes.hpp"
#include "server_core.hpp"

namespace poolrun::pool {
namespace {

using nlohmann::json;

json nodeList(ServerCore& m, Context&) {
  return m.read([](const PoolState& s) {
    json out = json::array();
    for (const NodeInfo& n : s.nodeInfos()) out.push_back(toJson(n));
    return out;
  });
}

json nodeView(ServerCore& m, Context& c) {
  return m.read(
      [&](const PoolState& s) { return toJson(PoolService::clusterNode(s, c.params[0], "the pool")); });
}

json registerNodeList(ServerCore& m, Context& c) {
  std::vector<topo::ClusterNode> nodes = registrationFromJson(parseBody(c.req.body));
  return m.mutate([&](PoolState& s, TimePoint now) {
    for (const auto& n : nodes) s.registerNode(n);
    s.tick(now, m.opt.stale_after);
    return json{{"registered", nodes.size()}};
  });
}

json changeNodeState(ServerCore& m, Context& c, NodeState target) {
  takesNoFields(c.req.body);
  const std::string& name = c.params[0];
  return m.mutate([&](PoolState& s, TimePoint now) {
    auto node = s.nodeMap().find(name);
    const bool changes = node != s.nodeMap().end() && node->second.state != target;
    PoolService::setNodeState(s, name, target);
    if (changes) {
      json fields = {{"node", name}, {"state", toString(target)}};
      fields.update(auditOf(c));
      m.events->record("node_state", fields, now);
    }
    s.tick(now, m.opt.stale_after);
    return json{{"node", name}, {"state", target == NodeState::kDraining ? "draining" : "up"}};
  });
}

json drainNode(ServerCore& m, Context& c) {
  return changeNodeState(m, c, NodeState::kDraining);
}

json resumeNode(ServerCore& m, Context& c) {
  return changeNodeState(m, c, NodeState::kUp);
}

json failGpu(ServerCore& m, Context& c) {
  takesNoFields(c.req.body);
  const std::string& name = c.params[0];
  size_t index = static_cast<size_t>(integerIn(c.params[1], "GPU index", 0, kGpuIndexRange.max));
  return m.mutate([&](PoolState& s, TimePoint now) {
    m.failByAdmin(s, name, index, auditOf(c), now);
    s.tick(now, m.opt.stale_after);
    return json{{"node", name}, {"index", index}, {"state", "failed"}};
  });
}

// Every GPU of a node: what an administrator does with a node that must not take a lease again
// before someone has looked at it (poolctl fail NODE, the dashboard's "Fail node").
json failNode(ServerCore& m, Context& c) {
  takesNoFields(c.req.body);
  const std::string& name = c.params[0];
  return m.mutate([&](PoolState& s, TimePoint now) {
    auto node = s.nodeMap().find(name);
    if (node == s.nodeMap().end())
      throw Error(ErrorCode::kNotFound, "no node '" + name + "' in the pool (see `poolctl nodes`)");
    const size_t count = node->second.gpuCount();
    for (size_t index = 0; index < count; ++index) m.failByAdmin(s, name, index, auditOf(c), now);
    s.tick(now, m.opt.stale_after);
    return json{{"node", name}, {"gpus_failed", count}};
  });
}

json setMigLayout(ServerCore& m, Context& c) {
  const std::string& name = c.params[0];
  size_t index = static_cast<size_t>(integerIn(c.params[1], "GPU index", 0, kGpuIndexRange.max));
  const std::vector<std::string> profiles = migLayoutFromJson(parseBody(c.req.body));
  return m.mutate([&](PoolState& s, TimePoint now) {
    s.setMigLayout(name, index, profiles);
    json fields = {{"node", name}, {"index", index}, {"profiles", profiles}};
    fields.update(auditOf(c));
    m.events->record("mig_layout_asked", fields, now);
    s.tick(now, m.opt.stale_after);
    return json{{"node", name}, {"index", index}, {"mig_layout", profiles}};
  });
}

}  // namespace

std::vector<RouteSpec> nodeRoutes() {
  return {
      {"GET", "/v1/nodes", Role::kUser, StateLock::kRead, "", nodeList},
      {"GET", "/v1/nodes/*", Role::kUser, StateLock::kRead, "", nodeView},
      {"POST", "/v1/nodes", Role::kAdmin, StateLock::kChange, "register nodes", registerNodeList},
      {"POST", "/v1/nodes/*/drain", Role::kAdmin, StateLock::kChange, "drain nodes", drainNode},
      {"POST", "/v1/nodes/*/resume", Role::kAdmin, StateLock::kChange, "resume nodes", resumeNode},
      {"POST", "/v1/nodes/*/gpus/*/fail", Role::kAdmin, StateLock::kChange, "mark GPUs failed", failGpu},
      {"POST", "/v1/nodes/*/fail", Role::kAdmin, StateLock::kChange, "mark GPUs failed", failNode},
      {"POST", "/v1/nodes/*/gpus/*/mig", Role::kAdmin, StateLock::kChange, "change MIG layouts",
       setMigLayout},
  };
}

}  // namespace poolrun::pool
