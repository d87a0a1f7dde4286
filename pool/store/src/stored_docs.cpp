#include "stored_docs.hpp"

#include "poolrun/common/names.hpp"
#include "poolrun/pool/json.hpp"

namespace poolrun::pool {

using nlohmann::json;

json healthToJson(const PoolNode& n) {
  json doc = json::object();
  if (!n.agent.empty()) doc["agent"] = n.agent;
  if (!n.launch.empty()) doc["launch"] = n.launch;
  for (const auto& [index, f] : n.failures)
    doc["failures"][std::to_string(index)] = {{"reason", f.reason}, {"time_ms", toMillis(f.time)}};
  for (const auto& [index, count] : n.ecc_acknowledged)
    doc["ecc_acknowledged"][std::to_string(index)] = count;
  for (const auto& [index, profiles] : n.mig_layouts) doc["mig_layouts"][std::to_string(index)] = profiles;
  if (n.drained_by_agent) doc["drained_by_agent"] = n.drain_reason;
  return doc;
}

json levelsDoc(const topo::NodeLevels& levels) {
  json doc = json::object();
  for (const topo::LevelField& level : topo::kLevelFields)
    if (!(levels.*level.member).empty()) doc[level.key] = levels.*level.member;
  return doc;
}

topo::NodeLevels levelsFromJson(const json& doc) {
  topo::NodeLevels levels;
  for (const topo::LevelField& level : topo::kLevelFields)
    levels.*level.member = doc.value(level.key, std::string());
  return levels;
}

void healthFromJson(const json& doc, PoolNode& n) {
  if (!doc.is_object()) return;
  n.agent = doc.value("agent", "");
  n.launch = doc.value("launch", "");
  auto index = [](const std::string& key) { return static_cast<size_t>(std::stoul(key)); };
  if (auto f = doc.find("failures"); f != doc.end() && f->is_object())
    for (const auto& [key, v] : f->items())
      n.failures[index(key)] = {v.value("reason", ""), fromMillis(v.value("time_ms", int64_t{0}))};
  if (auto e = doc.find("ecc_acknowledged"); e != doc.end() && e->is_object())
    for (const auto& [key, v] : e->items()) n.ecc_acknowledged[index(key)] = v.get<uint64_t>();
  if (auto m = doc.find("mig_layouts"); m != doc.end() && m->is_object())
    for (const auto& [key, v] : m->items()) n.mig_layouts[index(key)] = v.get<std::vector<std::string>>();
  if (auto d = doc.find("drained_by_agent");
      d != doc.end() && d->is_string() && n.state == NodeState::kDraining) {
    n.drained_by_agent = true;
    n.drain_reason = d->get<std::string>();
  }
}

json requestDoc(const RememberedRequest& r) {
  return {{"lease", r.lease}, {"ticket", r.ticket}, {"at_ms", toMillis(r.at)}};
}

RememberedRequest requestFromDoc(const json& doc) {
  RememberedRequest r;
  r.lease = doc.at("lease").get<std::string>();
  r.ticket = doc.at("ticket").get<int64_t>();
  r.at = fromMillis(doc.at("at_ms").get<int64_t>());
  if (!r.lease.empty()) common::checkLeaseId(r.lease, "its lease");
  if (r.ticket < 0) throw std::runtime_error("its ticket " + std::to_string(r.ticket) + " is negative");
  return r;
}

json joinTokenDoc(const JoinToken& t) {
  json doc = {{"hash", t.hash},
              {"created_by", t.created_by},
              {"created_ms", toMillis(t.created)},
              {"expires_ms", toMillis(t.expires)}};
  if (!t.node.empty()) {
    doc["node"] = t.node;
    doc["credential"] = t.credential;
    doc["used_ms"] = toMillis(t.used);
  }
  return doc;
}

JoinToken joinTokenFromDoc(const json& doc) {
  JoinToken t;
  t.hash = doc.at("hash").get<std::string>();
  t.created_by = doc.at("created_by").get<std::string>();
  t.created = fromMillis(doc.at("created_ms").get<int64_t>());
  t.expires = fromMillis(doc.at("expires_ms").get<int64_t>());
  t.node = doc.value("node", "");
  t.credential = doc.value("credential", "");
  t.used = fromMillis(doc.value("used_ms", int64_t{0}));
  return t;
}

json credentialDoc(const NodeCredential& c) {
  json doc = {{"node", c.node}, {"hash", c.hash}, {"token", c.token}, {"joined_ms", toMillis(c.joined)}};
  if (!c.revoked_by.empty()) {
    doc["revoked_by"] = c.revoked_by;
    doc["revoked_ms"] = toMillis(c.revoked);
  }
  return doc;
}

NodeCredential credentialFromDoc(const json& doc) {
  NodeCredential c;
  c.node = doc.at("node").get<std::string>();
  c.hash = doc.at("hash").get<std::string>();
  c.token = doc.at("token").get<std::string>();
  c.joined = fromMillis(doc.at("joined_ms").get<int64_t>());
  c.revoked_by = doc.value("revoked_by", "");
  c.revoked = fromMillis(doc.value("revoked_ms", int64_t{0}));
  return c;
}

json queueDoc(const QueueEntry& e) {
  const char* status = e.status == QueueEntry::Status::kWaiting   ? "waiting"
                       : e.status == QueueEntry::Status::kGranted ? "granted"
                                                                  : "failed";
  return {{"ticket", e.ticket},
          {"request", toJson(e.request)},
          {"enqueued_ms", toMillis(e.enqueued)},
          {"heartbeat_ms", toMillis(e.heartbeat)},
          {"status", status},
          {"lease", e.lease_id},
          {"reason", e.reason}};
}

QueueEntry queueFromDoc(const json& doc) {
  QueueEntry e;
  e.ticket = doc.at("ticket").get<int64_t>();
  e.request = storedRequestFromJson(doc.at("request"));
  e.enqueued = fromMillis(doc.at("enqueued_ms").get<int64_t>());
  e.heartbeat = fromMillis(doc.at("heartbeat_ms").get<int64_t>());
  std::string status = doc.at("status").get<std::string>();
  e.status = status == "waiting"   ? QueueEntry::Status::kWaiting
             : status == "granted" ? QueueEntry::Status::kGranted
                                   : QueueEntry::Status::kFailed;
  e.lease_id = doc.value("lease", "");
  e.reason = doc.value("reason", "");
  return e;
}

}  // namespace poolrun::pool
