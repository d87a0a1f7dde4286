#include "poolrun/pool/agent_protocol.hpp"

#include <cmath>

#include "json_read.hpp"
#include "poolrun/pool/json.hpp"
#include "poolrun/topo/hash.hpp"
#include "poolrun/topo/names.hpp"
#include "poolrun/topo/writers.hpp"

namespace poolrun::pool {

using nlohmann::json;
using namespace json_read;

namespace {

constexpr size_t kMaxVersionBytes = 128;
constexpr size_t kMaxErrorBytes = 1024;
constexpr Range<uint32_t> kPidRange{1, 1u << 30};
constexpr Range<int64_t> kIntervalRange{1, 3600};

void checkSchema(const JsonFields& f, const char* schema) {
  std::string s = f.string("schema");
  if (s != schema)
    f.failField("schema",
                "'" + topo::printable(s) + "' is not " + schema + " (an agent of another version?)");
}

// An optional JSON number: null where the value is unknown.
json optional(const std::optional<double>& v) {
  return v ? json(*v) : json(nullptr);
}
json optional(const std::optional<uint64_t>& v) {
  return v ? json(*v) : json(nullptr);
}

std::optional<double> numberOr(const JsonFields& f, std::string_view key, double min, double max) {
  if (!f.has(key)) return std::nullopt;
  return f.number(key, min, max);
}

std::optional<uint64_t> countOr(const JsonFields& f, std::string_view key) {
  if (!f.has(key)) return std::nullopt;
  return f.integer<uint64_t>(key, 0, UINT64_MAX);
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
          {"ecc_uncorrected_volatile", optional(g.ecc_uncorrected_volatile)},
          {"retired_pages_pending", g.retired_pages_pending},
          {"remapping_failure", g.remapping_failure},
          {"xid_events", xids},
          {"processes", processes},
          {"error", g.error}};
}

topo::GpuSample gpuSampleFromJson(const JsonFields& f) {
  f.allowOnly({"index", "uuid", "pci", "time_ms", "sm_utilization", "memory_utilization", "memory_used_bytes",
               "memory_total_bytes", "temperature_c", "power_w", "ecc_uncorrected_volatile",
               "retired_pages_pending", "remapping_failure", "xid_events", "processes", "error"});
  topo::GpuSample g;
  g.index = integer(f, "index", kGpuIndexRange);
  g.uuid = textOr(f, "uuid", topo::kMaxLabelBytes, Text::kClient);
  g.pci = textOr(f, "pci", 64, Text::kClient);
  g.time = timeField(f, "time_ms");
  g.sm_utilization = numberOr(f, "sm_utilization", 0, 1);
  g.memory_utilization = numberOr(f, "memory_utilization", 0, 1);
  g.memory_used_bytes = countOr(f, "memory_used_bytes");
  g.memory_total_bytes = countOr(f, "memory_total_bytes");
  g.temperature_c = numberOr(f, "temperature_c", -273.15, 1000);
  g.power_w = numberOr(f, "power_w", 0, 1e6);
  g.ecc_uncorrected_volatile = countOr(f, "ecc_uncorrected_volatile");
  g.retired_pages_pending = f.boolean("retired_pages_pending", false);
  g.remapping_failure = f.boolean("remapping_failure", false);
  const json& xids = f.optionalArray("xid_events");
  if (xids.size() > kMaxXidEventsPerGpu)
    f.failField("xid_events", std::to_string(xids.size()) + " events, more than the " +
                                  std::to_string(kMaxXidEventsPerGpu) + " one heartbeat may carry");
  for (size_t i = 0; i < xids.size(); ++i) {
    JsonFields e = f.child(xids[i], f.element("xid_events", i));
    e.allowOnly({"xid", "time_ms"});
    g.xid_events.push_back({e.integer<uint64_t>("xid", 0, UINT32_MAX), timeField(e, "time_ms")});
  }
  const json& processes = f.optionalArray("processes");
  if (processes.size() > kMaxProcessesPerGpu)
    f.failField("processes", std::to_string(processes.size()) + " processes, more than the " +
                                 std::to_string(kMaxProcessesPerGpu) + " one heartbeat may carry");
  for (size_t i = 0; i < processes.size(); ++i) {
    JsonFields p = f.child(processes[i], f.element("processes", i));
    p.allowOnly({"pid", "used_memory_bytes"});
    g.processes.push_back(
        {integer(p, "pid", kPidRange), p.integer<uint64_t>("used_memory_bytes", 0, UINT64_MAX, 0)});
  }
  g.error = textOr(f, "error", kMaxErrorBytes, Text::kClient);
  return g;
}

json toJson(const topo::NicPortSample& n) {
  return {{"nic", n.nic},
          {"port", n.port},
          {"state", topo::toString(n.state)},
          {"rate_gbps", n.rate_gbps},
          {"time_ms", toMillis(n.time)}};
}

topo::NicPortSample nicSampleFromJson(const JsonFields& f) {
  f.allowOnly({"nic", "port", "state", "rate_gbps", "time_ms"});
  topo::NicPortSample n;
  n.nic = text(f, "nic", topo::kMaxLabelBytes, Text::kClient);
  n.port = f.integer("port", 0, 255);
  std::string state = text(f, "state", 32, Text::kClient);
  n.state = topo::portStateFromString(state);
  if (n.state == topo::PortState::kUnknown && state != topo::toString(topo::PortState::kUnknown))
    f.failField("state",
                "'" + state + "' is not a port state (down, init, armed, active, active_defer, unknown)");
  n.rate_gbps = f.number("rate_gbps", 0, 1e6, 0);
  n.time = timeField(f, "time_ms");
  return n;
}

}  // namespace

std::string topologyHash(const topo::NodeTopology& topology) {
  // Where the topology was read from, and what its reader warned of, are not part of it: the
  // reader of a registration names its own source and has no warnings.
  nlohmann::ordered_json doc = topo::toJson(topology);
  doc.erase("source");
  doc.erase("warnings");
  return topo::fnv1aHex(doc.dump());
}

json toJson(const NodeRegistration& r) {
  return {{"schema", kRegistrationSchema}, {"node", toJson(r.node)}, {"agent", r.agent_version}};
}

NodeRegistration nodeRegistrationFromJson(const json& doc) {
  JsonFields f = clientFields(doc, {"schema", "node", "agent"}, "the node registration");
  checkSchema(f, kRegistrationSchema);
  NodeRegistration r;
  r.node = clusterNodeFromJson(f.need("node"));
  r.agent_version = text(f, "agent", kMaxVersionBytes, Text::kClient);
  return r;
}

json toJson(const Heartbeat& h) {
  json gpus = json::array();
  for (const topo::GpuSample& g : h.gpus) gpus.push_back(toJson(g));
  json nics = json::array();
  for (const topo::NicPortSample& n : h.nics) nics.push_back(toJson(n));
  json owners = json::array();
  for (const auto& [pid, lease] : h.process_leases) owners.push_back({{"pid", pid}, {"lease", lease}});
  return {{"schema", kHeartbeatSchema},
          {"node", h.node},
          {"agent", h.agent_version},
          {"time_ms", toMillis(h.time)},
          {"topology_hash", h.topology_hash},
          {"gpus", gpus},
          {"nics", nics},
          {"process_leases", owners}};
}

Heartbeat heartbeatFromJson(const json& doc) {
  JsonFields f = clientFields(
      doc, {"schema", "node", "agent", "time_ms", "topology_hash", "gpus", "nics", "process_leases"},
      "the heartbeat");
  checkSchema(f, kHeartbeatSchema);
  Heartbeat h;
  h.node = nodeName(f, "node");
  h.agent_version = text(f, "agent", kMaxVersionBytes, Text::kClient);
  h.time = timeField(f, "time_ms");
  h.topology_hash = text(f, "topology_hash", 64, Text::kClient);
  const json& gpus = f.array("gpus");
  if (gpus.size() > kGpuIndexRange.max + 1)
    f.failField("gpus", std::to_string(gpus.size()) + " GPUs, more than a node may have (" +
                            std::to_string(kGpuIndexRange.max + 1) + ")");
  for (size_t i = 0; i < gpus.size(); ++i) {
    h.gpus.push_back(gpuSampleFromJson(f.child(gpus[i], f.element("gpus", i))));
    for (size_t j = 0; j < i; ++j)
      if (h.gpus[j].index == h.gpus[i].index)
        f.failField("gpus", "GPU index " + std::to_string(h.gpus[i].index) + " appears twice");
  }
  const json& nics = f.optionalArray("nics");
  if (nics.size() > kMaxNicPorts)
    f.failField("nics", std::to_string(nics.size()) + " ports, more than " + std::to_string(kMaxNicPorts));
  for (size_t i = 0; i < nics.size(); ++i)
    h.nics.push_back(nicSampleFromJson(f.child(nics[i], f.element("nics", i))));
  const json& owners = f.optionalArray("process_leases");
  if (owners.size() > kMaxProcessesPerGpu * 8)
    f.failField("process_leases", std::to_string(owners.size()) + " processes, more than " +
                                      std::to_string(kMaxProcessesPerGpu * 8));
  for (size_t i = 0; i < owners.size(); ++i) {
    JsonFields o = f.child(owners[i], f.element("process_leases", i));
    o.allowOnly({"pid", "lease"});
    h.process_leases[integer(o, "pid", kPidRange)] = leaseId(o, "lease");
  }
  return h;
}

json toJson(const HeartbeatReply& r) {
  json leases = json::array();
  for (const auto& [index, lease] : r.gpu_leases) leases.push_back({{"index", index}, {"lease", lease}});
  return {{"schema", kHeartbeatReplySchema},
          {"register_again", r.register_again},
          {"interval_s", r.interval.count()},
          {"gpu_leases", leases}};
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
  return r;
}

}  // namespace poolrun::pool
