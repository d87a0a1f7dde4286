#include "poolrun/pool/json.hpp"

#include <utility>

#include "poolrun/pool/limits.hpp"
#include "poolrun/topo/names.hpp"
#include "poolrun/topo/writers.hpp"

namespace poolrun::pool {
namespace {

using nlohmann::json;
using std::chrono::seconds;

// Unix milliseconds that system_clock can hold (until about 2262); INT64_MAX stands for never.
constexpr Range<int64_t> kTimeMillisRange{
    0, std::chrono::duration_cast<std::chrono::milliseconds>(TimePoint::max().time_since_epoch()).count()};

// A value as the message shows it: JSON, cut short, bytes that are not UTF-8 replaced.
std::string shown(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  return s.size() > 40 ? s.substr(0, 40) + "..." : s;
}

// `name` is the field as messages name it, with the path of a nested one ("gpus[2].index"); the
// part after the last "]." is the key looked up.
std::string keyOf(const std::string& name) {
  size_t at = name.rfind("].");
  return at == std::string::npos ? name : name.substr(at + 2);
}

const json& field(const json& doc, const std::string& name) {
  if (!doc.is_object()) throw badInput("expected a JSON object, got " + std::string(doc.type_name()));
  auto it = doc.find(keyOf(name));
  if (it == doc.end()) throw badInput("missing field '" + name + "'");
  return *it;
}

bool present(const json& doc, const std::string& name) {
  if (!doc.is_object()) return false;
  auto it = doc.find(keyOf(name));
  return it != doc.end() && !it->is_null();
}

// A whole number (not a float, a bool or a string) in `range`.
template <typename T>
T integerValue(const json& v, const std::string& name, Range<T> range) {
  std::string allowed = " (" + std::to_string(range.min) + " to " + std::to_string(range.max) + ")";
  if (!v.is_number_integer())
    throw badInput("field '" + name + "': " + shown(v) + " is not a whole number" + allowed);
  auto inRange = [&](auto x) {
    return std::cmp_greater_equal(x, range.min) && std::cmp_less_equal(x, range.max);
  };
  bool ok = v.is_number_unsigned() ? inRange(v.get<uint64_t>()) : inRange(v.get<int64_t>());
  if (!ok) throw badInput("field '" + name + "': " + shown(v) + " is out of range" + allowed);
  return v.is_number_unsigned() ? static_cast<T>(v.get<uint64_t>()) : static_cast<T>(v.get<int64_t>());
}

template <typename T>
T integer(const json& doc, const std::string& name, Range<T> range) {
  return integerValue(field(doc, name), name, range);
}

template <typename T>
T integerOr(const json& doc, const std::string& name, Range<T> range, T fallback) {
  return present(doc, name) ? integer(doc, name, range) : fallback;
}

std::optional<seconds> secondsOr(const json& doc, const std::string& name, Range<int64_t> range) {
  if (!present(doc, name)) return std::nullopt;
  return seconds(integer(doc, name, range));
}

// A whole number the pool wrote itself (a stored row, a reply), clamped into [min, max]: the
// ranges of limits.hpp are what clients may ask for now, and an older pool accepted more (a TTL of
// 2^63 s, say), which must neither stop poold at start nor overflow the clock.
template <typename T>
T storedInteger(const json& doc, const std::string& name, T min, T max, T fallback) {
  if (!present(doc, name)) return fallback;
  const json& v = field(doc, name);
  if (!v.is_number_integer()) throw badInput("field '" + name + "': " + shown(v) + " is not a whole number");
  if (v.is_number_unsigned()) {
    uint64_t u = v.get<uint64_t>();
    return std::cmp_greater(u, max) ? max : std::cmp_less(u, min) ? min : static_cast<T>(u);
  }
  int64_t i = v.get<int64_t>();
  return std::cmp_greater(i, max) ? max : std::cmp_less(i, min) ? min : static_cast<T>(i);
}

// Durations the pool stored: at least a second, at most a century (far inside the clock).
constexpr int64_t kStoredSecondsMax = int64_t{100} * 366 * 86400;

std::optional<seconds> storedSecondsOr(const json& doc, const std::string& name) {
  if (!present(doc, name)) return std::nullopt;
  return seconds(storedInteger<int64_t>(doc, name, 0, kStoredSecondsMax, 0));
}

bool boolean(const json& doc, const std::string& name, bool fallback) {
  if (!present(doc, name)) return fallback;
  const json& v = field(doc, name);
  if (!v.is_boolean()) throw badInput("field '" + name + "': " + shown(v) + " is not true or false");
  return v.get<bool>();
}

// How strictly a string is read: what a client sends may hold no control characters and has a
// length limit; what the pool itself wrote (replies, stored rows) need only be UTF-8, so that
// writing it out again cannot throw.
enum class Text { kClient, kStored };

void checkUtf8(const std::string& s, const std::string& name) {
  if (size_t bad = topo::utf8ErrorOffset(s); bad != s.size())
    throw badInput("field '" + name + "' '" + topo::printable(s) + "': byte " + std::to_string(bad) +
                   " is not UTF-8");
}

std::string textValue(const json& v, const std::string& name, size_t maxBytes, Text mode) {
  if (!v.is_string()) throw badInput("field '" + name + "': " + shown(v) + " is not a string");
  const std::string& s = v.get_ref<const std::string&>();
  if (mode == Text::kClient)
    topo::checkText(s, maxBytes, "field '" + name + "'");
  else
    checkUtf8(s, name);
  return s;
}

std::string text(const json& doc, const std::string& name, size_t maxBytes, Text mode) {
  return textValue(field(doc, name), name, maxBytes, mode);
}

std::string textOr(const json& doc, const std::string& name, size_t maxBytes, Text mode) {
  return present(doc, name) ? text(doc, name, maxBytes, mode) : std::string();
}

std::map<std::string, std::string> labelsOr(const json& doc, const std::string& name, Text mode) {
  std::map<std::string, std::string> out;
  if (!present(doc, name)) return out;
  const json& v = field(doc, name);
  if (!v.is_object())
    throw badInput("field '" + name + "': " + shown(v) + " is not an object of strings ({\"rack\": \"r1\"})");
  for (const auto& [key, value] : v.items()) {
    if (mode == Text::kClient)
      topo::checkText(key, topo::kMaxLabelBytes, "a key of field '" + name + "'");
    else
      checkUtf8(key, name);
    out[key] = textValue(value, name + "." + topo::printable(key), topo::kMaxLabelBytes, mode);
  }
  return out;
}

std::string nodeName(const json& doc, const std::string& name) {
  std::string n = text(doc, name, topo::kMaxNodeNameBytes, Text::kStored);
  topo::checkNodeName(n, "field '" + name + "'");
  return n;
}

std::string leaseId(const json& doc, const std::string& name) {
  std::string id = text(doc, name, topo::kMaxLeaseIdBytes, Text::kStored);
  topo::checkLeaseId(id, "field '" + name + "'");
  return id;
}

const json& array(const json& doc, const std::string& name) {
  const json& v = field(doc, name);
  if (!v.is_array()) throw badInput("field '" + name + "': " + shown(v) + " is not a list");
  return v;
}

// A client's document may hold only the fields its reader knows: a misspelt one ("ttl" for
// "ttl_s") would otherwise be ignored without a word.
void checkKeys(const json& doc, std::initializer_list<const char*> known, const std::string& what) {
  if (!doc.is_object())
    throw badInput(what + ": expected a JSON object, got " + std::string(doc.type_name()));
  for (const auto& [key, value] : doc.items()) {
    bool ok = false;
    for (const char* k : known) ok = ok || key == k;
    if (ok) continue;
    std::string list;
    for (const char* k : known) list += (list.empty() ? "" : ", ") + std::string(k);
    throw badInput("unknown field '" + topo::printable(key) + "' in " + what + " (known: " + list + ")");
  }
}

// Every string (keys too) of a nested document is UTF-8, and it is at most `depth` levels deep:
// what topo::fromJson keeps is written out again later.
void checkStrings(const json& v, const std::string& path, int depth) {
  if (depth > 64) throw badInput("field '" + path + "' is nested more than 64 levels deep");
  if (v.is_string()) {
    checkUtf8(v.get_ref<const std::string&>(), path);
  } else if (v.is_array()) {
    for (size_t i = 0; i < v.size(); ++i) checkStrings(v[i], path + "[" + std::to_string(i) + "]", depth + 1);
  } else if (v.is_object()) {
    for (const auto& [key, value] : v.items()) {
      if (topo::utf8ErrorOffset(key) != key.size())
        throw badInput("field '" + path + "' has a key that is not UTF-8 ('" + topo::printable(key) + "')");
      checkStrings(value, path + "." + key, depth + 1);
    }
  }
}

}  // namespace

int64_t toMillis(TimePoint t) {
  if (t == kNever) return INT64_MAX;
  return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}

TimePoint fromMillis(int64_t ms) {
  if (ms == INT64_MAX) return kNever;
  if (ms < kTimeMillisRange.min || ms > kTimeMillisRange.max)
    throw badInput("time " + std::to_string(ms) + " ms is out of range (" +
                   std::to_string(kTimeMillisRange.min) + " to " + std::to_string(kTimeMillisRange.max) +
                   " Unix milliseconds, or " + std::to_string(INT64_MAX) + " for never)");
  return TimePoint(std::chrono::duration_cast<TimePoint::duration>(std::chrono::milliseconds(ms)));
}

namespace {

TimePoint timeField(const json& doc, const std::string& name) {
  const json& v = field(doc, name);
  if (v.is_number_integer() && v == json(INT64_MAX)) return kNever;
  return fromMillis(integerValue(v, name, kTimeMillisRange));
}

}  // namespace

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
  l.id = leaseId(doc, "id");
  l.owner = text(doc, "owner", 0, Text::kStored);
  l.job_name = textOr(doc, "job_name", 0, Text::kStored);
  const json& gpus = array(doc, "gpus");
  for (size_t i = 0; i < gpus.size(); ++i) {
    std::string at = "gpus[" + std::to_string(i) + "]";
    l.gpus.push_back({nodeName(gpus[i], at + ".node"), integer(gpus[i], at + ".index", kGpuIndexRange)});
  }
  l.priority = storedInteger<int>(doc, "priority", INT32_MIN, INT32_MAX, 0);
  l.created = timeField(doc, "created_ms");
  l.expires = timeField(doc, "expires_ms");
  l.ttl = seconds(storedInteger<int64_t>(doc, "ttl_s", 1, kStoredSecondsMax, 60));
  if (present(doc, "max_end_ms")) l.max_end = timeField(doc, "max_end_ms");
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
  checkKeys(
      doc,
      {"gpus", "gpus_per_node", "whole_nodes", "gpu_model", "min_memory_bytes", "fabric", "labels",
       "one_switch", "priority", "owner", "job_name", "wait_s", "ttl_s", "max_duration_s", "request_id"},
      "the lease request");
  LeaseRequest r;
  r.gpus = integer(doc, "gpus", kGpusRange);
  r.gpus_per_node = integerOr(doc, "gpus_per_node", kGpusPerNodeRange, 0);
  r.whole_nodes = boolean(doc, "whole_nodes", false);
  r.gpu_model = textOr(doc, "gpu_model", topo::kMaxLabelBytes, Text::kClient);
  r.min_memory_bytes = integerOr(doc, "min_memory_bytes", kMinMemoryBytesRange, uint64_t{0});
  if (present(doc, "fabric")) {
    std::string f = text(doc, "fabric", topo::kMaxLabelBytes, Text::kClient);
    try {
      r.fabric = topo::fabricFromString(f);
    } catch (const Error& e) {
      throw badInput("field 'fabric': " + std::string(e.what()));
    }
  }
  r.labels = labelsOr(doc, "labels", Text::kClient);
  r.one_switch = boolean(doc, "one_switch", false);
  r.priority = integerOr(doc, "priority", kPriorityRange, 0);
  r.owner = textOr(doc, "owner", topo::kMaxOwnerBytes, Text::kClient);
  if (!r.owner.empty()) topo::checkOwner(r.owner, "field 'owner'");
  r.job_name = textOr(doc, "job_name", topo::kMaxJobNameBytes, Text::kClient);
  r.wait = secondsOr(doc, "wait_s", kWaitSecondsRange);
  r.ttl = secondsOr(doc, "ttl_s", kTtlSecondsRange).value_or(seconds(60));
  r.max_duration = secondsOr(doc, "max_duration_s", kMaxDurationSecondsRange);
  // Read by poold (a retried acquire gets the first answer); checked here with the rest.
  if (present(doc, "request_id")) leaseId(doc, "request_id");
  return r;
}

LeaseRequest storedRequestFromJson(const json& doc) {
  LeaseRequest r;
  r.gpus = storedInteger<int>(doc, "gpus", 1, INT32_MAX, 1);
  r.gpus_per_node = storedInteger<int>(doc, "gpus_per_node", 0, INT32_MAX, 0);
  r.whole_nodes = boolean(doc, "whole_nodes", false);
  r.gpu_model = textOr(doc, "gpu_model", 0, Text::kStored);
  r.min_memory_bytes = storedInteger<uint64_t>(doc, "min_memory_bytes", 0, UINT64_MAX, 0);
  if (present(doc, "fabric")) {
    try {
      r.fabric = topo::fabricFromString(text(doc, "fabric", 0, Text::kStored));
    } catch (const Error& e) {
      throw badInput("field 'fabric': " + std::string(e.what()));
    }
  }
  r.labels = labelsOr(doc, "labels", Text::kStored);
  r.one_switch = boolean(doc, "one_switch", false);
  r.priority = storedInteger<int>(doc, "priority", INT32_MIN, INT32_MAX, 0);
  r.owner = textOr(doc, "owner", 0, Text::kStored);
  r.job_name = textOr(doc, "job_name", 0, Text::kStored);
  r.wait = storedSecondsOr(doc, "wait_s");
  r.ttl = storedSecondsOr(doc, "ttl_s").value_or(seconds(60));
  if (r.ttl.count() < 1) r.ttl = seconds(1);
  r.max_duration = storedSecondsOr(doc, "max_duration_s");
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
  constexpr Range<int> kCount{0, INT32_MAX};
  PoolStatus s;
  const json& n = field(doc, "nodes");
  s.nodes_up = integer(n, "up", kCount);
  s.nodes_draining = integer(n, "draining", kCount);
  s.nodes_down = integer(n, "down", kCount);
  const json& g = field(doc, "gpus");
  s.gpus_free = integer(g, "free", kCount);
  s.gpus_leased = integer(g, "leased", kCount);
  s.gpus_failed = integer(g, "failed", kCount);
  s.leases = integer(doc, "leases", kCount);
  s.queued = integer(doc, "queued", kCount);
  s.leases_granted = integerOr(doc, "leases_granted", Range<uint64_t>{0, UINT64_MAX}, uint64_t{0});
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
  n.name = nodeName(doc, "name");
  n.switch_name = textOr(doc, "switch", 0, Text::kStored);
  n.rail_group = textOr(doc, "rail_group", 0, Text::kStored);
  n.fabric = textOr(doc, "fabric", 0, Text::kStored);
  n.labels = labelsOr(doc, "labels", Text::kStored);
  n.state = nodeStateFromString(text(doc, "state", 0, Text::kStored));
  const json& gpus = array(doc, "gpus");
  for (size_t i = 0; i < gpus.size(); ++i) {
    const json& g = gpus[i];
    std::string at = "gpus[" + std::to_string(i) + "].";
    GpuInfo gi;
    gi.index = integer(g, at + "index", kGpuIndexRange);
    gi.pci = textOr(g, at + "pci", 0, Text::kStored);
    gi.uuid = textOr(g, at + "uuid", 0, Text::kStored);
    gi.model = textOr(g, at + "model", 0, Text::kStored);
    gi.memory_bytes = integerOr(g, at + "memory_bytes", Range<uint64_t>{0, UINT64_MAX}, uint64_t{0});
    std::string st = text(g, at + "state", 0, Text::kStored);
    gi.state = st == "leased" ? GpuState::kLeased : st == "failed" ? GpuState::kFailed : GpuState::kFree;
    if (present(g, at + "lease")) gi.lease = leaseId(g, at + "lease");
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
          {"enqueued_ms", toMillis(q.enqueued)},
          {"reason", q.reason},
          {"planned_start_ms", q.planned_start ? json(toMillis(*q.planned_start)) : json(nullptr)}};
}

QueueInfo queueInfoFromJson(const json& doc) {
  QueueInfo q;
  q.ticket = integer(doc, "ticket", Range<int64_t>{0, INT64_MAX});
  q.position = integer(doc, "position", Range<int>{0, INT32_MAX});
  q.owner = textOr(doc, "owner", 0, Text::kStored);
  q.job_name = textOr(doc, "job_name", 0, Text::kStored);
  q.gpus = integer(doc, "gpus", kGpusRange);
  q.priority = integerOr(doc, "priority", kPriorityRange, 0);
  q.enqueued = timeField(doc, "enqueued_ms");
  q.reason = textOr(doc, "reason", 0, Text::kStored);
  if (present(doc, "planned_start_ms")) q.planned_start = timeField(doc, "planned_start_ms");
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
  checkKeys(doc, {"name", "switch", "rail_group", "labels", "topology_file", "fabric", "topology"},
            "the node");
  topo::ClusterNode n;
  n.name = nodeName(doc, "name");
  const std::string where = "node " + n.name;
  n.switch_name = textOr(doc, "switch", topo::kMaxLabelBytes, Text::kClient);
  n.rail_group = textOr(doc, "rail_group", topo::kMaxLabelBytes, Text::kClient);
  n.labels = labelsOr(doc, "labels", Text::kClient);
  n.topology_file = textOr(doc, "topology_file", 4096, Text::kClient);
  if (present(doc, "fabric")) {
    try {
      n.fabric = topo::fabricFromString(text(doc, "fabric", topo::kMaxLabelBytes, Text::kClient));
    } catch (const Error& e) {
      throw badInput(where + ": field 'fabric': " + e.what());
    }
  }
  const json& t = field(doc, "topology");
  if (!t.is_object()) throw badInput(where + ": field 'topology' is not a poolrun.topology/1 document");
  checkStrings(t, "topology", 0);
  try {
    n.topology = std::make_shared<topo::NodeTopology>(topo::fromJson(t, where));
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {  // what the topology reader did not expect (a json::exception)
    throw badInput(where + ": field 'topology': " + e.what());
  }
  return n;
}

std::vector<topo::ClusterNode> registrationFromJson(const json& doc) {
  checkKeys(doc, {"nodes"}, "the registration");
  const json& nodes = array(doc, "nodes");
  std::vector<topo::ClusterNode> out;
  for (size_t i = 0; i < nodes.size(); ++i) {
    try {
      out.push_back(clusterNodeFromJson(nodes[i]));
    } catch (const Error& e) {
      throw Error(e.code(), "nodes[" + std::to_string(i) + "]: " + e.what());
    }
  }
  return out;
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
