#include "poolrun/pool/agent_protocol.hpp"

#include <cmath>

#include "poolrun/common/hash.hpp"
#include "poolrun/common/names.hpp"
#include "poolrun/pool/json.hpp"
#include "poolrun/pool/json_read.hpp"
#include "poolrun/pool/json_write.hpp"
#include "poolrun/pool/request_options.hpp"
#include "poolrun/topo/writers.hpp"

namespace poolrun::pool {

bool isSecretOf(std::string_view prefix, std::string_view text) {
  return text.size() == prefix.size() + 64 && text.starts_with(prefix) &&
         text.substr(prefix.size()).find_first_not_of("0123456789abcdef") == std::string_view::npos;
}

using nlohmann::json;
using namespace json_read;

namespace {

constexpr Range<int64_t> kIntervalRange{1, 3600};

void checkSchema(const JsonFields& f, const char* schema) {
  std::string s = f.string("schema");
  if (s != schema)
    f.failField("schema",
                "'" + common::printable(s) + "' is not " + schema + " (an agent of another version?)");
}

// An optional JSON number: null where the value is unknown.
json optional(const std::optional<double>& v) {
  return v ? json(*v) : json(nullptr);
}
json optional(const std::optional<uint64_t>& v) {
  return v ? json(*v) : json(nullptr);
}

json toJson(const topo::GpuSample& g) {
  json xids = json::array();
  for (const topo::XidEvent& e : g.xid_events)
    xids.push_back({{"xid", e.xid}, {"time_ms", toMillis(e.time)}});
  json processes = json::array();
  for (const topo::GpuProcess& p : g.processes)
    processes.push_back({{"pid", p.pid}, {"used_memory_bytes", p.used_memory_bytes}});
  return {{"index", g.index},
          {"uuid", g.uuid},
          {"pci", g.pci},
          {"time_ms", toMillis(g.time)},
          {"sm_utilization", optional(g.sm_utilization)},
          {"memory_utilization", optional(g.memory_utilization)},
          {"memory_used_bytes", optional(g.memory_used_bytes)},
          {"memory_total_bytes", optional(g.memory_total_bytes)},
          {"temperature_c", optional(g.temperature_c)},
          {"power_w", optional(g.power_w)},
          {"energy_mj", optional(g.energy_mj)},
          {"ecc_uncorrected_volatile", optional(g.ecc_uncorrected_volatile)},
          {"retired_pages_pending", g.retired_pages_pending},
          {"remapping_failure", g.remapping_failure},
          {"xid_events", xids},
          {"processes", processes},
          {"error", g.error}};
}

json toJson(const topo::NicPortSample& n) {
  return {{"nic", n.nic},
          {"port", n.port},
          {"state", topo::toString(n.state)},
          {"rate_gbps", n.rate_gbps},
          {"time_ms", toMillis(n.time)}};
}

}  // namespace

std::string launchAddressProblem(const std::string& address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) return "has no :PORT";
  const std::string host = address.substr(0, colon), port = address.substr(colon + 1);
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos ||
      std::stoi(port) < 1 || std::stoi(port) > 65535)
    return "has no port from 1 to 65535 after its last ':'";
  const bool bracketed = host.size() > 2 && host.front() == '[' && host.back() == ']';
  const std::string allowed = bracketed ? "0123456789abcdefABCDEF:.[]"
                                        : "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-";
  if (host.size() > 255 || host.find_first_not_of(allowed) != std::string::npos)
    return "has no host name or IP address before its port (an IPv6 address goes in brackets)";
  return "";
}

json toJson(const NodeRegistration& r) {
  json doc = {{"schema", kRegistrationSchema}, {"node", toJson(r.node)}, {"agent", r.agent_version}};
  if (!r.launch.empty()) doc["launch"] = r.launch;
  return doc;
}

NodeRegistration nodeRegistrationFromJson(const json& doc) {
  JsonFields f = clientFields(doc, {"schema", "node", "agent", "launch"}, "the node registration");
  checkSchema(f, kRegistrationSchema);
  NodeRegistration r;
  r.node = clusterNodeFromJson(f.need("node"));
  r.agent_version = text(f, "agent", kMaxVersionBytes, Text::kClient);
  if (f.has("launch")) {
    r.launch = text(f, "launch", 300, Text::kClient);
    if (std::string why = launchAddressProblem(r.launch); !why.empty())
      throw badInput("field 'launch' of the node registration: '" + common::printable(r.launch) + "' " + why);
  }
  return r;
}

// Per GPU index, an error ("" for none): MIG layouts made, MPS daemons that did not start.
json migResults(const std::map<size_t, std::string>& results) {
  json out = json::array();
  for (const auto& [index, error] : results) out.push_back({{"index", index}, {"error", error}});
  return out;
}

json toJson(const Heartbeat& h) {
  json gpus = json::array();
  for (const topo::GpuSample& g : h.gpus) gpus.push_back(toJson(g));
  json nics = json::array();
  for (const topo::NicPortSample& n : h.nics) nics.push_back(toJson(n));
  json owners = json::array();
  for (const auto& [pid, lease] : h.process_leases) owners.push_back({{"pid", pid}, {"lease", lease}});
  json doc = {{"schema", kHeartbeatSchema},
              {"node", h.node},
              {"agent", h.agent_version},
              {"time_ms", toMillis(h.time)},
              {"topology_hash", h.topology_hash},
              {"gpus", gpus},
              {"nics", nics},
              {"process_leases", owners},
              {"mig_results", migResults(h.mig_results)},
              {"mps_errors", migResults(h.mps_errors)}};
  if (h.health_failure) doc["health_failure"] = *h.health_failure;
  return doc;
}

json toJson(const HeartbeatReply& r) {
  json leases = json::array();
  for (const auto& [index, lease] : r.gpu_leases) leases.push_back({{"index", index}, {"lease", lease}});
  json layouts = json::array();
  for (const auto& [index, profiles] : r.mig_layouts)
    layouts.push_back({{"index", index}, {"profiles", profiles}});
  json doc = {{"schema", kHeartbeatReplySchema},
              {"register_again", r.register_again},
              {"interval_s", r.interval.count()},
              {"gpu_leases", leases},
              {"mig_layouts", layouts},
              {"mps_gpus", r.mps_gpus},
              {"jobs", r.jobs}};
  if (r.leases) doc["leases"] = *r.leases;
  return doc;
}

std::string heartbeatReplyText(const HeartbeatReply& r) {
  using json_write::appendArray;
  using json_write::appendString;
  std::string out = R"({"schema":")";
  out += kHeartbeatReplySchema;
  out += R"(","register_again":)";
  out += r.register_again ? "true" : "false";
  out += R"(,"interval_s":)" + std::to_string(r.interval.count()) + ',';
  appendArray(out, "gpu_leases", r.gpu_leases, [&](const auto& entry) {
    out += R"({"index":)" + std::to_string(entry.first) + R"(,"lease":)";
    appendString(out, entry.second);
    out += '}';
  });
  out += ',';
  appendArray(out, "mig_layouts", r.mig_layouts, [&](const auto& entry) {
    out += R"({"index":)" + std::to_string(entry.first) + ',';
    appendArray(out, "profiles", entry.second, [&](const std::string& p) { appendString(out, p); });
    out += '}';
  });
  out += ',';
  appendArray(out, "mps_gpus", r.mps_gpus, [&](size_t gpu) { out += std::to_string(gpu); });
  out += r.jobs ? R"(,"jobs":true)" : R"(,"jobs":false)";
  if (r.leases) {
    out += ',';
    appendArray(out, "leases", *r.leases, [&](const std::string& lease) { appendString(out, lease); });
  }
  out += '}';
  return out;
}

HeartbeatReply heartbeatReplyFromJson(const json& doc) {
  JsonFields f = fieldsOf(doc);
  checkSchema(f, kHeartbeatReplySchema);
  HeartbeatReply r;
  r.register_again = f.boolean("register_again", false);
  r.interval =
      std::chrono::seconds(f.integer("interval_s", kIntervalRange.min, kIntervalRange.max, int64_t{5}));
  const json& leases = f.optionalArray("gpu_leases");
  for (size_t i = 0; i < leases.size(); ++i) {
    JsonFields l = f.child(leases[i], f.element("gpu_leases", i));
    r.gpu_leases[integer(l, "index", kGpuIndexRange)] = leaseId(l, "lease");
  }
  const json& layouts = f.optionalArray("mig_layouts");
  for (size_t i = 0; i < layouts.size(); ++i) {
    JsonFields l = f.child(layouts[i], f.element("mig_layouts", i));
    const size_t index = integer(l, "index", kGpuIndexRange);
    const json& profiles = l.array("profiles");
    if (profiles.empty() || profiles.size() > kMaxMigLayoutProfiles)
      l.failField("profiles", "a layout of 1 to " + std::to_string(kMaxMigLayoutProfiles) +
                                  " profiles, not " + std::to_string(profiles.size()));
    std::vector<std::string>& out = r.mig_layouts[index];
    for (size_t k = 0; k < profiles.size(); ++k) {
      if (!profiles[k].is_string()) l.failField("profiles", "expected a list of profile names");
      LeaseRequest named;
      setMigProfile(named, profiles[k].get<std::string>(), "field '" + l.element("profiles", k) + "'");
      out.push_back(named.mig_profile);
    }
  }
  const json& mps = f.optionalArray("mps_gpus");
  for (size_t i = 0; i < mps.size(); ++i) {
    if (!mps[i].is_number_unsigned() || mps[i].get<uint64_t>() > kGpuIndexRange.max)
      f.failField("mps_gpus", common::shownJson(mps[i]) + " is not a GPU index (0 to " +
                                  std::to_string(kGpuIndexRange.max) + ")");
    r.mps_gpus.insert(mps[i].get<size_t>());
  }
  r.jobs = f.boolean("jobs", false);
  if (f.has("leases")) {
    const json& held = f.array("leases");
    if (held.size() > kMaxNodeLeases)
      f.failField("leases", "at most " + std::to_string(kMaxNodeLeases) + " leases, not " +
                                std::to_string(held.size()));
    r.leases.emplace();
    for (size_t i = 0; i < held.size(); ++i) {
      if (!held[i].is_string())
        f.failField("leases", "expected a list of lease ids, not " + common::shownJson(held[i]));
      const std::string& id = held[i].get_ref<const std::string&>();
      common::checkLeaseId(id, "field '" + f.element("leases", i) + "'");
      r.leases->insert(id);
    }
  }
  return r;
}

}  // namespace poolrun::pool
