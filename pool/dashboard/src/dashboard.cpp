// The dashboard's files, snapshot and history (dashboard.hpp).

#include "poolrun/pool/dashboard.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>

#include "poolrun/common/time_text.hpp"
#include "poolrun/pool/json.hpp"
#include "poolrun/pool/json_write.hpp"

namespace poolrun::pool {

// Generated from pool/dashboard/ui/ by cmake/PoolrunEmbedFiles.cmake.
const std::vector<std::pair<std::string_view, std::string_view>>& embeddedFiles();

namespace {

using json_write::appendArray;
using json_write::appendString;

using nlohmann::json;

const char* contentTypeOf(std::string_view name) {
  auto ends = [&](std::string_view suffix) {
    return name.size() >= suffix.size() && name.substr(name.size() - suffix.size()) == suffix;
  };
  if (ends(".html")) return "text/html; charset=utf-8";
  if (ends(".js")) return "text/javascript; charset=utf-8";
  if (ends(".css")) return "text/css; charset=utf-8";
  if (ends(".svg")) return "image/svg+xml";
  return "application/octet-stream";
}

void appendOptional(std::string& out, const std::optional<double>& v, double scale) {
  if (!v || !std::isfinite(*v))
    out += "null";
  else
    out += std::to_string(std::llround(*v * scale));
}

char gpuStateCode(GpuState s) {
  switch (s) {
    case GpuState::kFree:
      return 'f';
    case GpuState::kLeased:
      return 'l';
    case GpuState::kFailed:
      return 'x';
    case GpuState::kForeign:
      return 'o';
    case GpuState::kMig:
      return 'm';
  }
  return '?';
}

std::string foreignNote(const std::vector<topo::GpuProcess>& processes) {
  std::string note = "processes of no lease: ";
  for (size_t i = 0; i < processes.size() && i < 4; ++i) {
    if (i) note += ", ";
    note += "pid " + std::to_string(processes[i].pid);
    if (processes[i].used_memory_bytes)
      note += " (" + std::to_string(processes[i].used_memory_bytes >> 20) + " MiB)";
  }
  if (processes.size() > 4) note += ", " + std::to_string(processes.size() - 4) + " more";
  return note;
}

}  // namespace

std::optional<DashboardFile> dashboardFile(const std::vector<std::string>& segments) {
  std::string_view name;
  if (segments.empty())
    name = "index.html";
  else if (segments.size() == 2 && segments[0] == "ui")
    name = segments[1];
  else
    return std::nullopt;
  for (const auto& [path, body] : embeddedFiles())
    if (path == name) return DashboardFile{body, contentTypeOf(path)};
  return std::nullopt;
}

std::string dashboardFileNames() {
  std::string names;
  for (const auto& [path, body] : embeddedFiles()) names += (names.empty() ? "" : ", ") + std::string(path);
  return names;
}

std::vector<std::pair<std::string, std::string>> dashboardHeaders() {
  return {
      {"Content-Security-Policy",
       "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"},
      {"X-Content-Type-Options", "nosniff"},
      {"X-Frame-Options", "DENY"},
      {"Referrer-Policy", "no-referrer"},
      {"Cache-Control", "no-cache"}};
}

DashboardData captureDashboard(const PoolState& state, TimePoint now) {
  DashboardData d;
  d.time_ms = toMillis(now);
  d.status = state.status();
  std::map<std::string_view, int> leaseIndex;
  // The leases as the table shows them (their GPUs are in the GPU columns).
  for (Lease& l : state.leaseList()) {
    DashboardData::LeaseRow row;
    row.id = std::move(l.id);
    row.owner = std::move(l.owner);
    row.job = std::move(l.job_name);
    row.gpus = l.gpus.size();
    row.priority = l.priority;
    row.created = l.created;
    row.expires = l.expires;
    row.max_end = l.max_end;
    row.idle_since = l.idle_since;
    row.preemptible = l.preemptible;
    row.no_reclaim = l.no_reclaim;
    if (l.elastic) row.elastic = std::pair{l.elastic->gpus, l.elastic->max_gpus};
    row.preempt_at = l.preempt_at;
    row.reclaim_at = l.reclaim_at;
    row.at_risk_nodes = std::move(l.at_risk_nodes);
    d.leases.push_back(std::move(row));
  }
  for (size_t i = 0; i < d.leases.size(); ++i) leaseIndex.emplace(d.leases[i].id, static_cast<int>(i));
  const std::vector<const PoolNode*> nodes = state.nodesInOrder();
  size_t total = 0;
  for (const PoolNode* n : nodes) total += n->gpuCount();
  d.gpu_states.reserve(total);
  d.gpu_lease.reserve(total);
  for (auto* column : {&d.util_pct, &d.mem_used_mib, &d.mem_total_mib, &d.temp_c, &d.power_w})
    column->reserve(total);
  auto mib = [](const std::optional<uint64_t>& bytes) {
    return bytes ? std::optional<double>(static_cast<double>(*bytes >> 20)) : std::nullopt;
  };
  auto scaled = [](const std::optional<double>& v, double scale) {
    return v ? std::optional<double>(*v * scale) : std::nullopt;
  };
  std::vector<PoolState::GpuUse> uses;
  for (const PoolNode* n : nodes) {
    state.gpusOf(*n, uses);
    DashboardData::NodeRow row{n->name,      n->levels.switch_name, n->agent, n->state, n->live.unreachable,
                               std::nullopt, d.gpu_states.size()};
    if (n->live.last_heartbeat != TimePoint{})
      row.heartbeat_age_s = std::max<int64_t>(
          0, std::chrono::duration_cast<std::chrono::seconds>(now - n->live.last_heartbeat).count());
    d.nodes.push_back(std::move(row));
    for (size_t i = 0; i < n->gpuCount(); ++i) {
      const GpuState st = uses[i].state;
      const std::string* holder = uses[i].lease;
      auto lease = holder ? leaseIndex.find(*holder) : leaseIndex.end();
      const topo::GpuSample* sample = i < n->live.gpus.size() ? &n->live.gpus[i] : nullptr;
      d.gpu_states += gpuStateCode(st);
      d.gpu_lease.push_back(lease == leaseIndex.end() ? -1 : lease->second);
      d.util_pct.push_back(sample ? scaled(sample->sm_utilization, 100) : std::nullopt);
      d.mem_used_mib.push_back(sample ? mib(sample->memory_used_bytes) : std::nullopt);
      std::optional<uint64_t> memTotal = sample ? sample->memory_total_bytes : std::nullopt;
      if (!memTotal && n->topology->gpus[i].memory_bytes) memTotal = n->topology->gpus[i].memory_bytes;
      d.mem_total_mib.push_back(mib(memTotal));
      d.temp_c.push_back(sample ? sample->temperature_c : std::nullopt);
      d.power_w.push_back(sample ? sample->power_w : std::nullopt);
      // Notes are few: why a GPU failed (and when), the processes that make it foreign, or what its
      // sample could not read (a GPU NVML no longer lists).
      std::string note;
      if (st == GpuState::kFailed) {
        auto f = n->failures.find(i);
        note = f == n->failures.end() ? "marked failed"
                                      : (f->second.reason.empty() ? "marked failed" : f->second.reason) +
                                            " at " + common::rfc3339(f->second.time);
      } else if (st == GpuState::kForeign) {
        auto f = n->live.foreign.find(i);
        if (f != n->live.foreign.end()) note = foreignNote(f->second);
      }
      if (note.empty() && sample && !sample->error.empty()) note = sample->error;
      if (!note.empty()) d.notes.emplace_back(d.gpu_states.size() - 1, std::move(note));
    }
  }
  return d;
}

std::string dashboardJson(const DashboardData& d) {
  std::string out;
  out.reserve(512 + d.nodes.size() * 64 + d.gpu_states.size() * 32);
  out += R"({"schema":"poolrun.dashboard/1","time_ms":)" + std::to_string(d.time_ms);
  out += R"(,"status":)" + toJson(d.status).dump();
  out += ',';
  appendArray(out, "leases", d.leases, [&](const DashboardData::LeaseRow& l) {
    out += R"({"id":)";
    appendString(out, l.id);
    out += R"(,"owner":)";
    appendString(out, l.owner);
    out += R"(,"job":)";
    appendString(out, l.job);
    out += R"(,"gpus":)" + std::to_string(l.gpus) + R"(,"priority":)" + std::to_string(l.priority) +
           R"(,"created_ms":)" + std::to_string(toMillis(l.created)) + R"(,"expires_ms":)" +
           std::to_string(toMillis(l.expires));
    if (l.max_end) out += R"(,"max_end_ms":)" + std::to_string(toMillis(*l.max_end));
    if (l.idle_since) out += R"(,"idle_since_ms":)" + std::to_string(toMillis(*l.idle_since));
    if (l.preemptible) out += R"(,"preemptible":true)";
    if (l.no_reclaim) out += R"(,"no_reclaim":true)";
    if (l.elastic)
      out += R"(,"elastic":[)" + std::to_string(l.elastic->first) + "," + std::to_string(l.elastic->second) +
             "]";
    if (l.preempt_at) out += R"(,"preempt_at_ms":)" + std::to_string(toMillis(*l.preempt_at));
    if (l.reclaim_at) out += R"(,"reclaim_at_ms":)" + std::to_string(toMillis(*l.reclaim_at));
    if (!l.at_risk_nodes.empty()) {
      out += ',';
      appendArray(out, "at_risk_nodes", l.at_risk_nodes, [&](const std::string& n) { appendString(out, n); });
    }
    out += '}';
  });
  using NodeRow = DashboardData::NodeRow;
  out += R"(,"nodes":{)";
  appendArray(out, "name", d.nodes, [&](const NodeRow& n) { appendString(out, n.name); });
  out += ',';
  appendArray(out, "switch", d.nodes, [&](const NodeRow& n) { appendString(out, n.switch_name); });
  out += ',';
  appendArray(out, "state", d.nodes, [&](const NodeRow& n) {
    out += '"';
    out += toString(n.state);
    out += '"';
  });
  out += ',';
  appendArray(out, "unreachable", d.nodes, [&](const NodeRow& n) { out += n.unreachable ? '1' : '0'; });
  out += ',';
  appendArray(out, "agent", d.nodes, [&](const NodeRow& n) { appendString(out, n.agent); });
  out += ',';
  appendArray(out, "heartbeat_age_s", d.nodes, [&](const NodeRow& n) {
    out += n.heartbeat_age_s ? std::to_string(*n.heartbeat_age_s) : "null";
  });
  out += ',';
  appendArray(out, "first_gpu", d.nodes, [&](const NodeRow& n) { out += std::to_string(n.first_gpu); });
  out += R"(},"gpus":{"state":")";
  out += d.gpu_states;
  out += "\",";
  appendArray(out, "lease", d.gpu_lease, [&](int lease) { out += std::to_string(lease); });
  for (const auto& [name, column] :
       {std::pair{"util_pct", &d.util_pct}, std::pair{"mem_used_mib", &d.mem_used_mib},
        std::pair{"mem_total_mib", &d.mem_total_mib}, std::pair{"temp_c", &d.temp_c},
        std::pair{"power_w", &d.power_w}}) {
    out += ',';
    appendArray(out, name, *column, [&](const std::optional<double>& v) { appendOptional(out, v, 1); });
  }
  out += R"(},"notes":{)";
  for (size_t i = 0; i < d.notes.size(); ++i) {
    if (i) out += ',';
    out += '"' + std::to_string(d.notes[i].first) + "\":";
    appendString(out, d.notes[i].second);
  }
  out += "}}";
  return out;
}

std::string dashboardSnapshot(const PoolState& state, TimePoint now) {
  return dashboardJson(captureDashboard(state, now));
}

std::string forViewer(const std::string& snapshot, const Caller& who) {
  std::string you = R"({"you":{"owner":)";
  appendString(you, who.owner);
  you += R"(,"role":")";
  you += who.role();
  you += R"("},)";
  return you + snapshot.substr(1);
}

HistorySample historySample(const PoolState& state, TimePoint now) {
  HistorySample h;
  h.time_ms = toMillis(now);
  PoolStatus st = state.status();
  h.gpus = st.gpus_free + st.gpus_leased + st.gpus_failed + st.gpus_foreign + st.gpus_mig;
  h.leased = st.gpus_leased;
  h.failed = st.gpus_failed;
  h.unreachable = st.gpus_unreachable;
  double sum = 0;
  size_t readings = 0;
  for (const auto& [name, node] : state.nodeMap())
    for (const topo::GpuSample& g : node.live.gpus)
      if (g.sm_utilization) {
        sum += *g.sm_utilization;
        ++readings;
      }
  if (readings) h.utilization = sum / static_cast<double>(readings);
  double total = 0;
  for (const QueueInfo& q : state.queueList()) {
    double waited = std::max(0.0, std::chrono::duration<double>(now - q.enqueued).count());
    total += waited;
    h.wait_max_s = std::max(h.wait_max_s, waited);
    ++h.queued;
  }
  if (h.queued) h.wait_mean_s = total / h.queued;
  return h;
}

PoolHistory::PoolHistory(std::chrono::seconds interval, size_t capacity)
    : interval_(interval), capacity_(capacity) {}

bool PoolHistory::due(TimePoint now) const {
  std::lock_guard<std::mutex> lock(mu_);
  return !last_ || now - *last_ >= interval_;
}

void PoolHistory::add(const HistorySample& sample) {
  std::lock_guard<std::mutex> lock(mu_);
  last_ = TimePoint(std::chrono::milliseconds(sample.time_ms));
  samples_.push_back(sample);
  while (samples_.size() > capacity_) samples_.pop_front();
}

std::string PoolHistory::json() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out = R"({"schema":"poolrun.history/1","interval_s":)" + std::to_string(interval_.count()) +
                    R"(,"capacity":)" + std::to_string(capacity_) + R"(,"samples":[)";
  char buf[256];
  for (size_t i = 0; i < samples_.size(); ++i) {
    const HistorySample& h = samples_[i];
    std::string util = h.utilization ? std::to_string(std::round(*h.utilization * 1000) / 1000) : "null";
    std::snprintf(buf, sizeof buf, "%s[%lld,%d,%d,%d,%d,%s,%d,%.1f,%.1f]", i ? "," : "",
                  static_cast<long long>(h.time_ms), h.gpus, h.leased, h.failed, h.unreachable, util.c_str(),
                  h.queued, h.wait_mean_s, h.wait_max_s);
    out += buf;
  }
  out += "]}";
  return out;
}

}  // namespace poolrun::pool
