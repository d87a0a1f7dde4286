#include "poolrun/pool/json.hpp"

#include "poolrun/common/time_text.hpp"
#include "poolrun/pool/json_read.hpp"

#include <algorithm>
#include <cmath>
#include <utility>

#include "poolrun/common/json_fields.hpp"
#include "poolrun/common/names.hpp"
#include "poolrun/common/regular_file.hpp"
#include "poolrun/pool/agent_protocol.hpp"
#include "poolrun/pool/limits.hpp"
#include "poolrun/pool/request_options.hpp"
#include "poolrun/pool/state.hpp"
#include "poolrun/topo/writers.hpp"

namespace poolrun::pool {

using common::rfc3339;
namespace json_read {

using nlohmann::json;
using std::chrono::seconds;

JsonFields fieldsOf(const json& doc, std::string path) {
  return JsonFields(doc, std::move(path), [](const std::string& message) { throw badInput(message); });
}

JsonFields clientFields(const json& doc, std::initializer_list<std::string_view> known,
                        const std::string& what) {
  if (!doc.is_object())
    throw badInput(what + ": expected a JSON object, got " + std::string(doc.type_name()));
  JsonFields f = fieldsOf(doc);
  f.allowOnly(known, what);
  return f;
}

std::optional<seconds> secondsOr(const JsonFields& f, std::string_view key, Range<int64_t> range) {
  if (!f.has(key)) return std::nullopt;
  return seconds(integer(f, key, range));
}

std::optional<seconds> storedSecondsOr(const JsonFields& f, std::string_view key) {
  if (!f.has(key)) return std::nullopt;
  return seconds(storedInteger<int64_t>(f, key, 0, kStoredSecondsMax, 0));
}

void checkUtf8(const std::string& s, const std::string& name) {
  if (size_t bad = common::utf8ErrorOffset(s); bad != s.size())
    throw badInput("field '" + name + "' '" + common::printable(s) + "': byte " + std::to_string(bad) +
                   " is not UTF-8");
}

std::string text(const JsonFields& f, std::string_view key, size_t maxBytes, Text mode) {
  std::string s = f.string(key);
  if (mode == Text::kClient)
    common::checkText(s, maxBytes, "field '" + f.name(key) + "'");
  else if (mode == Text::kStored)
    checkUtf8(s, f.name(key));
  return s;
}

std::string textOr(const JsonFields& f, std::string_view key, size_t maxBytes, Text mode) {
  return f.has(key) ? text(f, key, maxBytes, mode) : std::string();
}

topo::NodeLevels levelsOr(const JsonFields& f, size_t maxBytes, Text mode) {
  topo::NodeLevels levels;
  for (const topo::LevelField& level : topo::kLevelFields)
    levels.*level.member = textOr(f, level.key, maxBytes, mode);
  return levels;
}

void putLevels(json& doc, const topo::NodeLevels& levels) {
  for (const topo::LevelField& level : topo::kLevelFields) doc[level.key] = levels.*level.member;
}

std::map<std::string, std::string> labelsOr(const JsonFields& f, std::string_view key, Text mode) {
  std::map<std::string, std::string> out;
  if (!f.has(key)) return out;
  const json& v = f.need(key);
  if (!v.is_object())
    f.failField(key, common::shownJson(v) + " is not an object of strings ({\"rack\": \"r1\"})");
  JsonFields labels = f.object(key);
  for (const auto& [label, value] : v.items()) {
    if (mode == Text::kClient)
      common::checkText(label, common::kMaxLabelBytes, "a key of field '" + f.name(key) + "'");
    else if (mode == Text::kStored)
      checkUtf8(label, f.name(key));
    out[label] = text(labels, label, common::kMaxLabelBytes, mode);
  }
  return out;
}

std::string nodeName(const JsonFields& f, std::string_view key) {
  std::string n = text(f, key, common::kMaxNodeNameBytes, Text::kStored);
  common::checkNodeName(n, "field '" + f.name(key) + "'");
  return n;
}

std::string leaseId(const JsonFields& f, std::string_view key) {
  std::string id = text(f, key, common::kMaxLeaseIdBytes, Text::kStored);
  common::checkLeaseId(id, "field '" + f.name(key) + "'");
  return id;
}

void checkStrings(const json& v, const std::string& path, int depth) {
  if (depth > 64) throw badInput("field '" + path + "' is nested more than 64 levels deep");
  if (v.is_string()) {
    checkUtf8(v.get_ref<const std::string&>(), path);
  } else if (v.is_array()) {
    for (size_t i = 0; i < v.size(); ++i) checkStrings(v[i], path + "[" + std::to_string(i) + "]", depth + 1);
  } else if (v.is_object()) {
    for (const auto& [key, value] : v.items()) {
      if (common::utf8ErrorOffset(key) != key.size())
        throw badInput("field '" + path + "' has a key that is not UTF-8 ('" + common::printable(key) + "')");
      checkStrings(value, path + "." + key, depth + 1);
    }
  }
}

}  // namespace json_read

using namespace json_read;

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

namespace json_read {

TimePoint rfc3339Field(const JsonFields& f, std::string_view key) {
  std::string v = f.string(key);
  if (std::optional<TimePoint> t = common::parseRfc3339(v)) return *t;
  f.failField(key, "'" + common::printable(v) + "' is not an RFC 3339 time (2026-12-01T15:04:05.123Z)");
}

TimePoint timeField(const JsonFields& f, std::string_view key) {
  const json& v = f.need(key);
  if (v.is_number_integer() && v == json(INT64_MAX)) return kNever;
  return fromMillis(integer(f, key, kTimeMillisRange));
}

}  // namespace json_read

namespace {

json gpuRefsJson(const std::vector<GpuRef>& refs) {
  json out = json::array();
  for (const GpuRef& g : refs) {
    json j = {{"node", g.node}, {"index", g.index}};
    if (!g.mig.empty()) j["mig"] = g.mig;
    if (g.share) j["share"] = {{"percent", g.share_percent}, {"memory_bytes", g.share_memory}};
    out.push_back(std::move(j));
  }
  return out;
}

size_t unitIndex(const JsonFields& f, std::string_view key) {
  const json& v = f.need(key);
  if (!v.is_number_integer()) f.failField(key, common::shownJson(v) + " is not a whole number");
  if (v.is_number_unsigned()
          ? v.get<uint64_t>() <= kUnitIndexRange.max
          : v.get<int64_t>() >= 0 && static_cast<uint64_t>(v.get<int64_t>()) <= kUnitIndexRange.max)
    return v.get<size_t>();
  f.failField(key, common::shownJson(v) + " is out of range (0 to " + std::to_string(kUnitIndexRange.max) +
                       ": a GPU, or a MIG instance past the GPUs)");
}

// A lease's units as stored and as a pool's reply carries them (both written by poolrun).
std::vector<GpuRef> gpuRefsFromJson(const JsonFields& f, std::string_view key) {
  std::vector<GpuRef> out;
  const json& refs = f.array(key);
  for (size_t i = 0; i < refs.size(); ++i) {
    JsonFields g = f.child(refs[i], f.element(key, i));
    GpuRef ref{nodeName(g, "node"), unitIndex(g, "index"), {}};
    if (g.has("mig")) {
      ref.mig = text(g, "mig", kMaxMigUuidBytes, Text::kClient);
      if (!ref.mig.starts_with("MIG-"))
        g.failField("mig", "'" + common::printable(ref.mig) + "' is not a MIG instance's UUID (MIG-...)");
    }
    if (g.has("share")) {
      JsonFields share = g.object("share");
      ref.share = true;
      ref.share_percent = integer(share, "percent", kSharePercentRange);
      ref.share_memory = integer(share, "memory_bytes", kShareMemoryBytesRange);
      if (!ref.mig.empty()) g.failField("share", "a MIG instance is not shared through MPS");
    }
    out.push_back(std::move(ref));
  }
  return out;
}

}  // namespace

json toJson(const Lease& l) {
  json gpus = gpuRefsJson(l.gpus);
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
  if (!l.account.empty()) doc["account"] = l.account;
  if (l.no_reclaim) doc["no_reclaim"] = true;
  if (l.preemptible) doc["preemptible"] = true;
  if (l.preempt_grace.count() > 0) doc["preempt_grace_s"] = l.preempt_grace.count();
  if (l.preempt_at) {
    doc["preempt_at_ms"] = toMillis(*l.preempt_at);
    doc["preempt_reason"] = l.preempt_reason;
    doc["preempted_for"] = l.preempted_for;
  }
  if (l.elastic) {
    doc["elastic"] = toJson(*l.elastic);
    doc["resizes"] = l.resizes;
    doc["resized_ms"] = toMillis(l.resized);
  }
  if (l.shrink_at) {
    doc["shrink"] = {{"gpus", gpuRefsJson(l.shrink_gpus)},
                     {"at_ms", toMillis(*l.shrink_at)},
                     {"reason", l.shrink_reason},
                     {"for", l.shrunk_for}};
  }
  if (!l.at_risk_nodes.empty()) doc["at_risk_nodes"] = l.at_risk_nodes;
  if (l.idle_since) doc["idle_since_ms"] = toMillis(*l.idle_since);
  if (l.reclaim_at) doc["reclaim_at_ms"] = toMillis(*l.reclaim_at);
  return doc;
}

Lease leaseFromJson(const json& doc) {
  JsonFields f = fieldsOf(doc);
  Lease l;
  l.id = leaseId(f, "id");
  l.owner = text(f, "owner", 0, Text::kStored);
  l.account = textOr(f, "account", 0, Text::kStored);
  l.job_name = textOr(f, "job_name", 0, Text::kStored);
  l.gpus = gpuRefsFromJson(f, "gpus");
  l.priority = storedInteger<int>(f, "priority", INT32_MIN, INT32_MAX, 0);
  l.created = timeField(f, "created_ms");
  l.expires = timeField(f, "expires_ms");
  l.ttl = seconds(storedInteger<int64_t>(f, "ttl_s", 1, kStoredSecondsMax, 60));
  if (f.has("max_end_ms")) l.max_end = timeField(f, "max_end_ms");
  l.no_reclaim = f.boolean("no_reclaim", false);
  l.preemptible = f.boolean("preemptible", false);
  l.preempt_grace = seconds(storedInteger<int64_t>(f, "preempt_grace_s", 0, kStoredSecondsMax, 0));
  if (f.has("preempt_at_ms")) {
    l.preempt_at = timeField(f, "preempt_at_ms");
    l.preempt_reason = textOr(f, "preempt_reason", 0, Text::kStored);
    l.preempted_for = storedInteger<int64_t>(f, "preempted_for", 0, INT64_MAX, 0);
  }
  l.resized = l.created;
  if (f.has("elastic")) {
    l.elastic = storedRequestFromJson(f.need("elastic"));
    l.resizes = storedInteger<int>(f, "resizes", 0, INT32_MAX, 0);
    if (f.has("resized_ms")) l.resized = timeField(f, "resized_ms");
  }
  if (f.has("shrink")) {
    JsonFields s = f.child(f.need("shrink"), "shrink");
    l.shrink_gpus = gpuRefsFromJson(s, "gpus");
    l.shrink_at = timeField(s, "at_ms");
    l.shrink_reason = textOr(s, "reason", 0, Text::kStored);
    l.shrunk_for = storedInteger<int64_t>(s, "for", 0, INT64_MAX, 0);
  }
  const json& atRisk = f.optionalArray("at_risk_nodes");
  for (size_t i = 0; i < atRisk.size(); ++i) {
    if (!atRisk[i].is_string()) f.failField("at_risk_nodes", "expected a list of node names");
    std::string n = atRisk[i].get<std::string>();
    common::checkNodeName(n, "field '" + f.element("at_risk_nodes", i) + "'");
    l.at_risk_nodes.push_back(std::move(n));
  }
  if (f.has("idle_since_ms")) l.idle_since = timeField(f, "idle_since_ms");
  if (f.has("reclaim_at_ms")) l.reclaim_at = timeField(f, "reclaim_at_ms");
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
              {"placement", r.topology_strict ? "strict" : "best-effort"},
              {"priority", r.priority},
              {"owner", r.owner},
              {"job_name", r.job_name},
              {"ttl_s", r.ttl.count()}};
  doc["fabric"] = r.fabric ? json(topo::toString(*r.fabric)) : json(nullptr);
  doc["wait_s"] = r.wait ? json(r.wait->count()) : json(nullptr);
  doc["max_duration_s"] = r.max_duration ? json(r.max_duration->count()) : json(nullptr);
  if (!r.account.empty()) doc["account"] = r.account;
  if (!r.reservation.empty()) doc["reservation"] = r.reservation;
  if (r.no_reclaim) doc["no_reclaim"] = true;
  if (r.preemptible) doc["preemptible"] = true;
  if (r.elastic()) {
    doc["max_gpus"] = r.max_gpus;
    doc["resize_interval_s"] = r.resize_interval.count();
  }
  if (r.mig()) {
    doc["mig_profile"] = r.mig_profile;
    if (r.mig_or_larger) doc["mig_or_larger"] = true;
  }
  if (r.share_percent > 0) doc["share_percent"] = r.share_percent;
  if (r.share_memory_bytes > 0) doc["share_memory_bytes"] = r.share_memory_bytes;
  if (!r.exclude_nodes.empty()) doc["exclude_nodes"] = r.exclude_nodes;
  return doc;
}

namespace {

// A request's field "placement": "strict" or "best-effort" (the default).
bool placementOr(const JsonFields& f, Text mode) {
  if (!f.has("placement")) return false;
  const std::string t = text(f, "placement", 0, mode);
  if (t == "best-effort") return false;
  if (t == "strict") return true;
  f.failField("placement", "'" + common::printable(t) + "': give strict or best-effort");
}

// A request's excluded nodes: a list of node names, at most kMaxExcludedNodes.
std::set<std::string> excludedNodes(const JsonFields& f) {
  std::set<std::string> out;
  if (!f.has("exclude_nodes")) return out;
  const json& nodes = f.array("exclude_nodes");
  if (nodes.size() > kMaxExcludedNodes)
    f.failField("exclude_nodes", "at most " + std::to_string(kMaxExcludedNodes) + " nodes, not " +
                                     std::to_string(nodes.size()));
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (!nodes[i].is_string())
      f.failField("exclude_nodes", "expected a list of node names, not " + common::shownJson(nodes[i]));
    const std::string& name = nodes[i].get_ref<const std::string&>();
    common::checkNodeName(name, "field '" + f.element("exclude_nodes", i) + "'");
    out.insert(name);
  }
  return out;
}

}  // namespace

// A request's number is read as a whole number in the range core's one check gives its field
// (requestFieldRange, limits.hpp), so that a value past the field's type is refused in the client's
// own digits; its names and texts are judged by validateRequest, and the fields together at submit.
template <typename T>
Range<T> requestRange(std::string_view field) {
  const Range<int64_t> r = requestFieldRange(field);
  return {static_cast<T>(r.min), static_cast<T>(r.max)};
}

LeaseRequest requestFromJson(const json& doc) {
  JsonFields f = clientFields(doc,
                              {"gpus",
                               "gpus_per_node",
                               "whole_nodes",
                               "gpu_model",
                               "min_memory_bytes",
                               "fabric",
                               "labels",
                               "one_switch",
                               "placement",
                               "priority",
                               "owner",
                               "account",
                               "reservation",
                               "job_name",
                               "wait_s",
                               "ttl_s",
                               "max_duration_s",
                               "no_reclaim",
                               "preemptible",
                               "max_gpus",
                               "resize_interval_s",
                               "mig_profile",
                               "mig_or_larger",
                               "share_percent",
                               "share_memory_bytes",
                               "exclude_nodes",
                               "request_id"},
                              "the lease request");
  LeaseRequest r;
  r.gpus = integer(f, "gpus", requestRange<int>("gpus"));
  r.gpus_per_node = integerOr(f, "gpus_per_node", requestRange<int>("gpus_per_node"), 0);
  r.whole_nodes = f.boolean("whole_nodes", false);
  r.gpu_model = textOr(f, "gpu_model", 0, Text::kAny);
  r.min_memory_bytes =
      integerOr(f, "min_memory_bytes", requestRange<uint64_t>("min_memory_bytes"), uint64_t{0});
  if (f.has("fabric")) {
    std::string fabric = text(f, "fabric", common::kMaxLabelBytes, Text::kClient);
    try {
      r.fabric = topo::fabricFromString(fabric);
    } catch (const Error& e) {
      throw badInput("field 'fabric': " + std::string(e.what()));
    }
  }
  r.labels = labelsOr(f, "labels", Text::kAny);
  r.exclude_nodes = excludedNodes(f);
  r.one_switch = f.boolean("one_switch", false);
  r.topology_strict = placementOr(f, Text::kAny);
  r.priority = integerOr(f, "priority", requestRange<int>("priority"), 0);
  r.owner = textOr(f, "owner", 0, Text::kAny);
  r.account = textOr(f, "account", 0, Text::kAny);
  r.reservation = textOr(f, "reservation", 0, Text::kAny);
  r.job_name = textOr(f, "job_name", 0, Text::kAny);
  r.wait = secondsOr(f, "wait_s", requestRange<int64_t>("wait_s"));
  r.ttl = secondsOr(f, "ttl_s", requestRange<int64_t>("ttl_s")).value_or(seconds(60));
  r.max_duration = secondsOr(f, "max_duration_s", requestRange<int64_t>("max_duration_s"));
  r.no_reclaim = f.boolean("no_reclaim", false);
  r.preemptible = f.boolean("preemptible", false);
  r.max_gpus = integerOr(f, "max_gpus", requestRange<int>("max_gpus"), 0);
  r.resize_interval =
      secondsOr(f, "resize_interval_s", requestRange<int64_t>("resize_interval_s")).value_or(seconds(600));
  r.mig_profile = textOr(f, "mig_profile", 0, Text::kAny);
  r.mig_or_larger = f.boolean("mig_or_larger", false);
  r.share_percent = integerOr(f, "share_percent", requestRange<int>("share_percent"), 0);
  r.share_memory_bytes =
      integerOr(f, "share_memory_bytes", requestRange<uint64_t>("share_memory_bytes"), uint64_t{0});
  // Read by poold (a retried acquire gets the first answer); checked here with the rest.
  if (f.has("request_id")) leaseId(f, "request_id");
  validateRequest(r, RequestCheck::kFieldsAlone);  // core's one check of its numbers and names
  return r;
}

LeaseRequest storedRequestFromJson(const json& doc) {
  JsonFields f = fieldsOf(doc);
  LeaseRequest r;
  r.gpus = storedInteger<int>(f, "gpus", 1, INT32_MAX, 1);
  r.gpus_per_node = storedInteger<int>(f, "gpus_per_node", 0, INT32_MAX, 0);
  r.whole_nodes = f.boolean("whole_nodes", false);
  r.gpu_model = textOr(f, "gpu_model", 0, Text::kStored);
  r.min_memory_bytes = storedInteger<uint64_t>(f, "min_memory_bytes", 0, UINT64_MAX, 0);
  if (f.has("fabric")) {
    try {
      r.fabric = topo::fabricFromString(text(f, "fabric", 0, Text::kStored));
    } catch (const Error& e) {
      throw badInput("field 'fabric': " + std::string(e.what()));
    }
  }
  r.labels = labelsOr(f, "labels", Text::kStored);
  r.exclude_nodes = excludedNodes(f);
  r.one_switch = f.boolean("one_switch", false);
  r.topology_strict = placementOr(f, Text::kStored);
  r.priority = storedInteger<int>(f, "priority", INT32_MIN, INT32_MAX, 0);
  r.owner = textOr(f, "owner", 0, Text::kStored);
  r.account = textOr(f, "account", 0, Text::kStored);
  r.reservation = textOr(f, "reservation", 0, Text::kStored);
  r.job_name = textOr(f, "job_name", 0, Text::kStored);
  r.wait = storedSecondsOr(f, "wait_s");
  r.ttl = storedSecondsOr(f, "ttl_s").value_or(seconds(60));
  if (r.ttl.count() < 1) r.ttl = seconds(1);
  r.max_duration = storedSecondsOr(f, "max_duration_s");
  r.no_reclaim = f.boolean("no_reclaim", false);
  r.preemptible = f.boolean("preemptible", false);
  r.max_gpus = storedInteger<int>(f, "max_gpus", 0, INT32_MAX, 0);
  r.resize_interval = storedSecondsOr(f, "resize_interval_s").value_or(seconds(600));
  r.mig_profile = textOr(f, "mig_profile", 0, Text::kStored);
  r.mig_or_larger = f.boolean("mig_or_larger", false);
  r.share_percent = storedInteger<int>(f, "share_percent", 0, 100, 0);
  r.share_memory_bytes = storedInteger<uint64_t>(f, "share_memory_bytes", 0, UINT64_MAX, 0);
  return r;
}

json toJson(const PoolStatus& s) {
  return {{"nodes",
           {{"up", s.nodes_up},
            {"draining", s.nodes_draining},
            {"down", s.nodes_down},
            {"unreachable", s.nodes_unreachable}}},
          {"gpus",
           {{"free", s.gpus_free},
            {"leased", s.gpus_leased},
            {"failed", s.gpus_failed},
            {"foreign", s.gpus_foreign},
            {"mig", s.gpus_mig},
            {"unreachable", s.gpus_unreachable}}},
          {"mig_instances", {{"free", s.mig_free}, {"leased", s.mig_leased}, {"unusable", s.mig_unusable}}},
          {"mps", {{"gpus", s.gpus_shared}, {"shares", s.mps_shares}}},
          {"leases", s.leases},
          {"queued", s.queued},
          {"leases_granted", s.leases_granted}};
}

PoolStatus statusFromJson(const json& doc) {
  constexpr Range<int> kCount{0, INT32_MAX};
  PoolStatus s;
  JsonFields f = fieldsOf(doc);
  JsonFields n = f.object("nodes");
  s.nodes_up = integer(n, "up", kCount);
  s.nodes_draining = integer(n, "draining", kCount);
  s.nodes_down = integer(n, "down", kCount);
  s.nodes_unreachable = integerOr(n, "unreachable", kCount, 0);
  JsonFields g = f.object("gpus");
  s.gpus_free = integer(g, "free", kCount);
  s.gpus_leased = integer(g, "leased", kCount);
  s.gpus_failed = integer(g, "failed", kCount);
  s.gpus_foreign = integerOr(g, "foreign", kCount, 0);
  s.gpus_mig = integerOr(g, "mig", kCount, 0);
  s.gpus_unreachable = integerOr(g, "unreachable", kCount, 0);
  if (f.has("mig_instances")) {
    JsonFields m = f.object("mig_instances");
    s.mig_free = integerOr(m, "free", kCount, 0);
    s.mig_leased = integerOr(m, "leased", kCount, 0);
    s.mig_unusable = integerOr(m, "unusable", kCount, 0);
  }
  if (f.has("mps")) {
    JsonFields m = f.object("mps");
    s.gpus_shared = integerOr(m, "gpus", kCount, 0);
    s.mps_shares = integerOr(m, "shares", kCount, 0);
  }
  s.leases = integer(f, "leases", kCount);
  s.queued = integer(f, "queued", kCount);
  s.leases_granted = integerOr(f, "leases_granted", Range<uint64_t>{0, UINT64_MAX}, uint64_t{0});
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
    j["failed_reason"] = g.failed_reason.empty() ? json(nullptr) : json(g.failed_reason);
    j["failed_at"] = g.failed_at ? json(rfc3339(*g.failed_at)) : json(nullptr);
    j["utilization"] = g.utilization ? json(*g.utilization) : json(nullptr);
    j["memory_used_bytes"] = g.memory_used_bytes ? json(*g.memory_used_bytes) : json(nullptr);
    j["memory_total_bytes"] = g.memory_total_bytes ? json(*g.memory_total_bytes) : json(g.memory_bytes);
    j["temperature_c"] = g.temperature_c ? json(*g.temperature_c) : json(nullptr);
    j["power_w"] = g.power_w ? json(*g.power_w) : json(nullptr);
    j["sample_error"] = g.sample_error.empty() ? json(nullptr) : json(g.sample_error);
    if (!g.foreign_processes.empty()) {
      json procs = json::array();
      for (const topo::GpuProcess& p : g.foreign_processes)
        procs.push_back({{"pid", p.pid}, {"used_memory_bytes", p.used_memory_bytes}});
      j["foreign_processes"] = std::move(procs);
    }
    if (!g.mig_instances.empty()) {
      json instances = json::array();
      for (const MigInstanceInfo& m : g.mig_instances) {
        json mj = {{"unit", m.unit},
                   {"gpu_instance", m.gpu_instance},
                   {"compute_instance", m.compute_instance},
                   {"profile", m.profile},
                   {"uuid", m.uuid},
                   {"sm", m.sm},
                   {"memory_bytes", m.memory_bytes},
                   {"state", toString(m.state)}};
        mj["lease"] = m.lease.empty() ? json(nullptr) : json(m.lease);
        instances.push_back(std::move(mj));
      }
      j["mig_instances"] = std::move(instances);
    }
    if (!g.mig_layout.empty()) j["mig_layout_asked"] = g.mig_layout;
    if (!g.shares.empty()) {
      json shares = json::array();
      for (const GpuInfo::Share& sh : g.shares)
        shares.push_back({{"lease", sh.lease}, {"percent", sh.percent}, {"memory_bytes", sh.memory_bytes}});
      j["mps_shares"] = std::move(shares);
    }
    gpus.push_back(std::move(j));
  }
  json doc = {{"name", n.name},
              {"fabric", n.fabric},
              {"labels", n.labels},
              {"state", n.unreachable ? "unreachable" : toString(n.state)},
              {"admin_state", toString(n.state)},
              {"gpus", std::move(gpus)}};
  putLevels(doc, n.levels);
  doc["agent"] = n.agent.empty() ? json(nullptr) : json(n.agent);
  doc["last_heartbeat"] = n.last_heartbeat ? json(rfc3339(*n.last_heartbeat)) : json(nullptr);
  if (!n.drain_reason.empty()) doc["drain_reason"] = n.drain_reason;
  return doc;
}

NodeInfo nodeInfoFromJson(const json& doc) {
  JsonFields f = fieldsOf(doc);
  NodeInfo n;
  n.name = nodeName(f, "name");
  n.levels = levelsOr(f, 0, Text::kStored);
  n.fabric = textOr(f, "fabric", 0, Text::kStored);
  n.labels = labelsOr(f, "labels", Text::kStored);
  std::string state = text(f, "state", 0, Text::kStored);
  n.unreachable = state == "unreachable";
  n.state = nodeStateFromString(f.has("admin_state") ? text(f, "admin_state", 0, Text::kStored) : state);
  n.agent = textOr(f, "agent", 0, Text::kStored);
  n.drain_reason = textOr(f, "drain_reason", 0, Text::kStored);
  if (f.has("last_heartbeat")) n.last_heartbeat = rfc3339Field(f, "last_heartbeat");
  const json& gpus = f.array("gpus");
  for (size_t i = 0; i < gpus.size(); ++i) {
    JsonFields g = f.child(gpus[i], f.element("gpus", i));
    GpuInfo gi;
    gi.index = integer(g, "index", kGpuIndexRange);
    gi.pci = textOr(g, "pci", 0, Text::kStored);
    gi.uuid = textOr(g, "uuid", 0, Text::kStored);
    gi.model = textOr(g, "model", 0, Text::kStored);
    gi.memory_bytes = integerOr(g, "memory_bytes", Range<uint64_t>{0, UINT64_MAX}, uint64_t{0});
    gi.state = gpuStateFromString(text(g, "state", 0, Text::kStored));
    if (g.has("lease")) gi.lease = leaseId(g, "lease");
    gi.failed_reason = textOr(g, "failed_reason", 0, Text::kStored);
    if (g.has("failed_at")) gi.failed_at = rfc3339Field(g, "failed_at");
    auto number = [&](const char* key) {
      return g.has(key) ? std::optional<double>(g.number(key, -1e9, 1e18)) : std::nullopt;
    };
    auto bytes = [&](const char* key) {
      return g.has(key) ? std::optional<uint64_t>(g.integer<uint64_t>(key, 0, UINT64_MAX)) : std::nullopt;
    };
    gi.utilization = number("utilization");
    gi.memory_used_bytes = bytes("memory_used_bytes");
    gi.memory_total_bytes = bytes("memory_total_bytes");
    gi.temperature_c = number("temperature_c");
    gi.power_w = number("power_w");
    gi.sample_error = textOr(g, "sample_error", 0, Text::kStored);
    const json& procs = g.optionalArray("foreign_processes");
    for (size_t k = 0; k < procs.size(); ++k) {
      JsonFields p = g.child(procs[k], g.element("foreign_processes", k));
      gi.foreign_processes.push_back({p.integer<uint32_t>("pid", 0, UINT32_MAX),
                                      p.integer<uint64_t>("used_memory_bytes", 0, UINT64_MAX, 0)});
    }
    const json& instances = g.optionalArray("mig_instances");
    for (size_t k = 0; k < instances.size(); ++k) {
      JsonFields m = g.child(instances[k], g.element("mig_instances", k));
      MigInstanceInfo mi;
      mi.unit = integer(m, "unit", kUnitIndexRange);
      mi.gpu_instance = m.integer<int>("gpu_instance", 0, INT32_MAX, 0);
      mi.compute_instance = m.integer<int>("compute_instance", 0, INT32_MAX, 0);
      mi.profile = textOr(m, "profile", 0, Text::kStored);
      mi.uuid = textOr(m, "uuid", 0, Text::kStored);
      mi.sm = m.integer<int>("sm", 0, INT32_MAX, 0);
      mi.memory_bytes = m.integer<uint64_t>("memory_bytes", 0, UINT64_MAX, 0);
      mi.state = gpuStateFromString(text(m, "state", 0, Text::kStored));
      if (m.has("lease")) mi.lease = leaseId(m, "lease");
      gi.mig_instances.push_back(std::move(mi));
    }
    const json& asked = g.optionalArray("mig_layout_asked");
    for (size_t k = 0; k < asked.size(); ++k) {
      if (!asked[k].is_string()) g.failField("mig_layout_asked", "expected a list of profile names");
      gi.mig_layout.push_back(asked[k].get<std::string>());
      checkUtf8(gi.mig_layout.back(), g.element("mig_layout_asked", k));
    }
    const json& shares = g.optionalArray("mps_shares");
    for (size_t k = 0; k < shares.size(); ++k) {
      JsonFields sh = g.child(shares[k], g.element("mps_shares", k));
      gi.shares.push_back({leaseId(sh, "lease"), integer(sh, "percent", kSharePercentRange),
                           integer(sh, "memory_bytes", kShareMemoryBytesRange)});
    }
    n.gpus.push_back(std::move(gi));
  }
  return n;
}

json toJson(const QuotaUse& u) {
  json doc = {{"kind", toString(u.quota.kind)},
              {"name", u.quota.name},
              {"members", u.quota.members},
              {"guaranteed", u.quota.guaranteed},
              {"used", u.used},
              {"borrowed", u.borrowed},
              {"waiting", u.waiting}};
  doc["limit"] = u.quota.limit ? json(*u.quota.limit) : json(nullptr);
  return doc;
}

QuotaUse quotaUseFromJson(const json& doc) {
  JsonFields f = fieldsOf(doc);
  QuotaUse u;
  const std::string kind = text(f, "kind", 0, Text::kStored);
  if (kind == "group")
    u.quota.kind = Quota::Kind::kGroup;
  else if (kind == "default")
    u.quota.kind = Quota::Kind::kDefault;
  else if (kind == "owner")
    u.quota.kind = Quota::Kind::kOwner;
  else
    f.failField("kind", "'" + common::printable(kind) + "' is not group, owner or default");
  u.quota.name = text(f, "name", 0, Text::kStored);
  const json& members = f.optionalArray("members");
  for (size_t i = 0; i < members.size(); ++i) {
    if (!members[i].is_string()) f.failField("members", "expected a list of owners");
    u.quota.members.push_back(members[i].get<std::string>());
  }
  u.quota.guaranteed = integer(f, "guaranteed", Range<int>{0, kGpusRange.max});
  if (f.has("limit")) u.quota.limit = integer(f, "limit", Range<int>{0, kGpusRange.max});
  u.used = integer(f, "used", Range<int>{0, INT32_MAX});
  u.borrowed = integer(f, "borrowed", Range<int>{0, INT32_MAX});
  u.waiting = integer(f, "waiting", Range<int>{0, INT32_MAX});
  return u;
}

json toJson(const topo::ClusterNode& n) {
  json doc = {{"name", n.name}, {"labels", n.labels}, {"topology_file", n.topology_file.string()}};
  putLevels(doc, n.levels);
  doc["fabric"] = n.fabric ? json(topo::toString(*n.fabric)) : json(nullptr);
  doc["topology"] = n.topology ? json(topo::toJson(*n.topology)) : json(nullptr);
  return doc;
}

topo::ClusterNode clusterNodeFromJson(const json& doc) {
  JsonFields f = clientFields(doc,
                              {"name", "nvlink_domain", "block", "switch", "rail_group", "spine", "labels",
                               "topology_file", "fabric", "topology"},
                              "the node");
  topo::ClusterNode n;
  n.name = nodeName(f, "name");
  const std::string where = "node " + n.name;
  n.levels = levelsOr(f, common::kMaxLabelBytes, Text::kClient);
  n.labels = labelsOr(f, "labels", Text::kClient);
  n.topology_file = textOr(f, "topology_file", 4096, Text::kClient);
  if (f.has("fabric")) {
    try {
      n.fabric = topo::fabricFromString(text(f, "fabric", common::kMaxLabelBytes, Text::kClient));
    } catch (const Error& e) {
      throw badInput(where + ": field 'fabric': " + e.what());
    }
  }
  const json& t = f.need("topology");
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

std::vector<std::string> migLayoutFromJson(const json& doc) {
  JsonFields f = clientFields(doc, {"profiles"}, "the MIG layout");
  const json& list = f.array("profiles");
  if (list.empty() || list.size() > kMaxMigLayoutProfiles)
    f.failField("profiles", "a layout of 1 to " + std::to_string(kMaxMigLayoutProfiles) + " profiles, not " +
                                std::to_string(list.size()) + " (\"3g.40gb\", \"3g.40gb\")");
  std::vector<std::string> out;
  for (size_t i = 0; i < list.size(); ++i) {
    if (!list[i].is_string()) f.failField("profiles", "expected a list of profile names (\"3g.40gb\")");
    LeaseRequest named;
    setMigProfile(named, list[i].get<std::string>(), "field '" + f.element("profiles", i) + "'");
    if (named.mig_or_larger)
      f.failField("profiles", "'" + list[i].get<std::string>() + "' names no single profile (drop the '+')");
    out.push_back(named.mig_profile);
  }
  return out;
}

std::vector<topo::ClusterNode> registrationFromJson(const json& doc) {
  JsonFields f = clientFields(doc, {"nodes"}, "the registration");
  const json& nodes = f.array("nodes");
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

}  // namespace poolrun::pool
