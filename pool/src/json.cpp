#include "poolrun/pool/json.hpp"

#include "poolrun/topo/writers.hpp"

namespace poolrun::pool {
namespace {

using nlohmann::json;

const json& field(const json& doc, const char* name) {
  if (!doc.is_object()) throw badInput("expected a JSON object, got " + std::string(doc.type_name()));
  auto it = doc.find(name);
  if (it == doc.end()) throw badInput("missing field '" + std::string(name) + "'");
  return *it;
}

template <typename T>
T get(const json& doc, const char* name) {
  const json& v = field(doc, name);
  try {
    return v.get<T>();
  } catch (const json::exception&) {
    throw badInput("field '" + std::string(name) + "' has the wrong type (" + v.type_name() + ")");
  }
}

template <typename T>
T getOr(const json& doc, const char* name, T fallback) {
  if (!doc.is_object() || !doc.contains(name) || doc[name].is_null()) return fallback;
  return get<T>(doc, name);
}

}  // namespace

int64_t toMillis(TimePoint t) {
  if (t == kNever) return INT64_MAX;
  return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}

TimePoint fromMillis(int64_t ms) {
  if (ms == INT64_MAX) return kNever;
  return TimePoint(std::chrono::duration_cast<TimePoint::duration>(std::chrono::milliseconds(ms)));
}

json toJson(const Lease& l) {
  json gpus = json::array();
  for (const GpuRef& g : l.gpus) gpus.push_back({{"node", g.node}, {"index", g.index}});
  json doc = {{"schema", kLeaseSchema},
              {"id", l.id},
              {"owner", l.owner},
              {"job_name", l.job_name},
              {"gpus", gpus},
              {"priority", l.priority},
              {"created_ms", toMillis(l.created)},
              {"expires_ms", toMillis(l.expires)},
              {"ttl_s", l.ttl.count()}};
  doc["max_end_ms"] = l.max_end ? json(toMillis(*l.max_end)) : json(nullptr);
  return doc;
}

Lease leaseFromJson(const json& doc) {
  Lease l;
  l.id = get<std::string>(doc, "id");
  l.owner = get<std::string>(doc, "owner");
  l.job_name = getOr<std::string>(doc, "job_name", "");
  const json& gpus = field(doc, "gpus");
  if (!gpus.is_array()) throw badInput("field 'gpus' is not a list");
  for (const json& g : gpus) l.gpus.push_back({get<std::string>(g, "node"), get<int>(g, "index")});
  l.priority = getOr<int>(doc, "priority", 0);
  l.created = fromMillis(get<int64_t>(doc, "created_ms"));
  l.expires = fromMillis(get<int64_t>(doc, "expires_ms"));
  l.ttl = std::chrono::seconds(getOr<int64_t>(doc, "ttl_s", 60));
  if (doc.contains("max_end_ms") && !doc["max_end_ms"].is_null())
    l.max_end = fromMillis(get<int64_t>(doc, "max_end_ms"));
  return l;
}

json toJson(const LeaseRequest& r) {
  json doc = {{"gpus", r.gpus},
              {"gpus_per_node", r.gpus_per_node},
              {"whole_nodes", r.whole_nodes},
              {"gpu_model", r.gpu_model},
              {"min_memory_bytes", r.min_memory_bytes},
              {"labels", r.labels},
              {"one_switch", r.one_switch},
              {"priority", r.priority},
              {"owner", r.owner},
              {"job_name", r.job_name},
              {"ttl_s", r.ttl.count()}};
  doc["fabric"] = r.fabric ? json(topo::toString(*r.fabric)) : json(nullptr);
  doc["wait_s"] = r.wait ? json(r.wait->count()) : json(nullptr);
  doc["max_duration_s"] = r.max_duration ? json(r.max_duration->count()) : json(nullptr);
  return doc;
}

LeaseRequest requestFromJson(const json& doc) {
  LeaseRequest r;
  r.gpus = get<int>(doc, "gpus");
  r.gpus_per_node = getOr<int>(doc, "gpus_per_node", 0);
  r.whole_nodes = getOr<bool>(doc, "whole_nodes", false);
  r.gpu_model = getOr<std::string>(doc, "gpu_model", "");
  r.min_memory_bytes = getOr<uint64_t>(doc, "min_memory_bytes", 0);
  if (doc.contains("fabric") && !doc["fabric"].is_null())
    r.fabric = topo::fabricFromString(get<std::string>(doc, "fabric"));
  r.labels = getOr<std::map<std::string, std::string>>(doc, "labels", {});
  r.one_switch = getOr<bool>(doc, "one_switch", false);
  r.priority = getOr<int>(doc, "priority", 0);
  r.owner = getOr<std::string>(doc, "owner", "");
  r.job_name = getOr<std::string>(doc, "job_name", "");
  if (doc.contains("wait_s") && !doc["wait_s"].is_null())
    r.wait = std::chrono::seconds(get<int64_t>(doc, "wait_s"));
  r.ttl = std::chrono::seconds(getOr<int64_t>(doc, "ttl_s", 60));
  if (doc.contains("max_duration_s") && !doc["max_duration_s"].is_null())
    r.max_duration = std::chrono::seconds(get<int64_t>(doc, "max_duration_s"));
  return r;
}

json toJson(const PoolStatus& s) {
  return {{"nodes", {{"up", s.nodes_up}, {"draining", s.nodes_draining}, {"down", s.nodes_down}}},
          {"gpus", {{"free", s.gpus_free}, {"leased", s.gpus_leased}, {"failed", s.gpus_failed}}},
          {"leases", s.leases},
          {"queued", s.queued},
          {"leases_granted", s.leases_granted}};
}

PoolStatus statusFromJson(const json& doc) {
  PoolStatus s;
  const json& n = field(doc, "nodes");
  s.nodes_up = get<int>(n, "up");
  s.nodes_draining = get<int>(n, "draining");
  s.nodes_down = get<int>(n, "down");
  const json& g = field(doc, "gpus");
  s.gpus_free = get<int>(g, "free");
  s.gpus_leased = get<int>(g, "leased");
  s.gpus_failed = get<int>(g, "failed");
  s.leases = get<int>(doc, "leases");
  s.queued = get<int>(doc, "queued");
  s.leases_granted = getOr<uint64_t>(doc, "leases_granted", 0);
  return s;
}

json toJson(const NodeInfo& n) {
  json gpus = json::array();
  for (const GpuInfo& g : n.gpus) {
    json j = {{"index", g.index},
              {"pci", g.pci},
              {"uuid", g.uuid},
              {"model", g.model},
              {"memory_bytes", g.memory_bytes},
              {"state", toString(g.state)}};
    j["lease"] = g.lease.empty() ? json(nullptr) : json(g.lease);
    gpus.push_back(std::move(j));
  }
  return {{"name", n.name},         {"switch", n.switch_name}, {"rail_group", n.rail_group},
          {"fabric", n.fabric},     {"labels", n.labels},      {"state", toString(n.state)},
          {"gpus", std::move(gpus)}};
}

NodeInfo nodeInfoFromJson(const json& doc) {
  NodeInfo n;
  n.name = get<std::string>(doc, "name");
  n.switch_name = getOr<std::string>(doc, "switch", "");
  n.rail_group = getOr<std::string>(doc, "rail_group", "");
  n.fabric = getOr<std::string>(doc, "fabric", "");
  n.labels = getOr<std::map<std::string, std::string>>(doc, "labels", {});
  n.state = nodeStateFromString(get<std::string>(doc, "state"));
  for (const json& g : field(doc, "gpus")) {
    GpuInfo gi;
    gi.index = get<int>(g, "index");
    gi.pci = getOr<std::string>(g, "pci", "");
    gi.uuid = getOr<std::string>(g, "uuid", "");
    gi.model = getOr<std::string>(g, "model", "");
    gi.memory_bytes = getOr<uint64_t>(g, "memory_bytes", 0);
    std::string st = get<std::string>(g, "state");
    gi.state = st == "leased" ? GpuState::kLeased : st == "failed" ? GpuState::kFailed : GpuState::kFree;
    gi.lease = getOr<std::string>(g, "lease", "");
    n.gpus.push_back(std::move(gi));
  }
  return n;
}

json toJson(const QueueInfo& q) {
  return {{"ticket", q.ticket},
          {"position", q.position},
          {"owner", q.owner},
          {"job_name", q.job_name},
          {"gpus", q.gpus},
          {"priority", q.priority},
          {"enqueued_ms", toMillis(q.enqueued)}};
}

QueueInfo queueInfoFromJson(const json& doc) {
  QueueInfo q;
  q.ticket = get<int64_t>(doc, "ticket");
  q.position = get<int>(doc, "position");
  q.owner = getOr<std::string>(doc, "owner", "");
  q.job_name = getOr<std::string>(doc, "job_name", "");
  q.gpus = get<int>(doc, "gpus");
  q.priority = getOr<int>(doc, "priority", 0);
  q.enqueued = fromMillis(get<int64_t>(doc, "enqueued_ms"));
  return q;
}

json toJson(const topo::ClusterNode& n) {
  json doc = {{"name", n.name},
              {"switch", n.switch_name},
              {"rail_group", n.rail_group},
              {"labels", n.labels},
              {"topology_file", n.topology_file.string()}};
  doc["fabric"] = n.fabric ? json(topo::toString(*n.fabric)) : json(nullptr);
  doc["topology"] = n.topology ? json(topo::toJson(*n.topology)) : json(nullptr);
  return doc;
}

topo::ClusterNode clusterNodeFromJson(const json& doc) {
  topo::ClusterNode n;
  n.name = get<std::string>(doc, "name");
  n.switch_name = getOr<std::string>(doc, "switch", "");
  n.rail_group = getOr<std::string>(doc, "rail_group", "");
  n.labels = getOr<std::map<std::string, std::string>>(doc, "labels", {});
  n.topology_file = getOr<std::string>(doc, "topology_file", "");
  if (doc.contains("fabric") && !doc["fabric"].is_null())
    n.fabric = topo::fabricFromString(get<std::string>(doc, "fabric"));
  const json& t = field(doc, "topology");
  if (!t.is_object())
    throw badInput("node " + n.name + ": field 'topology' is not a poolrun.topology/1 document");
  n.topology = std::make_shared<topo::NodeTopology>(topo::fromJson(t, "node " + n.name));
  return n;
}

std::string formatGpus(const std::vector<GpuRef>& gpus) {
  std::string out;
  for (size_t i = 0; i < gpus.size();) {
    size_t j = i;
    std::string part = gpus[i].node + ":";
    bool first = true;
    while (j < gpus.size() && gpus[j].node == gpus[i].node) {
      size_t k = j;
      while (k + 1 < gpus.size() && gpus[k + 1].node == gpus[j].node &&
             gpus[k + 1].index == gpus[k].index + 1)
        ++k;
      part += (first ? "" : ",") + std::to_string(gpus[j].index) +
              (k > j ? "-" + std::to_string(gpus[k].index) : "");
      first = false;
      j = k + 1;
    }
    out += (out.empty() ? "" : " ") + part;
    i = j;
  }
  return out;
}

PoolError queueTimeout(const LeaseRequest& r, int position, const std::string& pool) {
  return PoolError(PoolFailure::kTimeout, ErrorCode::kIo,
                   "a request for " + std::to_string(r.gpus) + " GPUs did not fit within --wait " +
                       std::to_string(r.wait ? r.wait->count() : 0) + "s (it was number " +
                       std::to_string(position) + " in the queue of " + pool +
                       "); wait longer or ask for fewer",
                   position);
}

}  // namespace poolrun::pool
