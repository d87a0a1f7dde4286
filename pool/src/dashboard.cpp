// The dashboard's files, snapshot and history (dashboard.hpp).

#include "dashboard.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>

#include "poolrun/common/time_text.hpp"
#include "poolrun/pool/json.hpp"

namespace poolrun::pool {

// Generated from pool/ui/ by cmake/PoolrunEmbedFiles.cmake.
const std::vector<std::pair<std::string_view, std::string_view>>& embeddedFiles();

namespace {

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

// A JSON string, with text that is not UTF-8 replaced (as every reply of poold).
void appendString(std::string& out, const std::string& text) {
  out += json(text).dump(-1, ' ', false, json::error_handler_t::replace);
}

void appendOptional(std::string& out, const std::optional<double>& v, double scale) {
  if (!v || !std::isfinite(*v))
    out += "null";
  else
    out += std::to_string(std::llround(*v * scale));
}

// `[a,b,...]` of each item, prefixed with `"name":` where a name is given.
template <typename T, typename F>
void appendArray(std::string& out, const char* name, const std::vector<T>& items, F&& each) {
  if (name) {
    out += '"';
    out += name;
    out += "\":";
  }
  out += '[';
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += ',';
    each(items[i]);
  }
  out += ']';
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

// One GPU as the snapshot writes it, read straight from the state (no NodeInfo, whose strings per GPU
// cost most of a snapshot at 100,000 GPUs).
struct GpuRow {
  const PoolNode* node;
  size_t index;
  GpuState state;
  int lease;  // into the snapshot's lease table; -1: none
  const topo::GpuSample* sample;
};

std::string dashboardSnapshot(const PoolState& state, TimePoint now) {
  const std::vector<const PoolNode*> nodes = state.nodesInOrder();
  const std::vector<Lease> leases = state.leaseList();
  std::map<std::string_view, int> leaseIndex;
  for (size_t i = 0; i < leases.size(); ++i) leaseIndex.emplace(leases[i].id, static_cast<int>(i));
  std::vector<GpuRow> gpus;
  std::vector<size_t> firstGpu;
  for (const PoolNode* n : nodes) {
    firstGpu.push_back(gpus.size());
    for (size_t i = 0; i < n->gpuCount(); ++i) {
      const std::string* holder = state.holder(n->name, i);
      auto lease = holder ? leaseIndex.find(*holder) : leaseIndex.end();
      gpus.push_back({n, i, state.gpuState(n->name, i), lease == leaseIndex.end() ? -1 : lease->second,
                      i < n->live.gpus.size() ? &n->live.gpus[i] : nullptr});
    }
  }

  std::string out;
  out.reserve(512 + nodes.size() * 64 + gpus.size() * 32);
  out += R"({"schema":"poolrun.dashboard/1","time_ms":)" + std::to_string(toMillis(now));
  out += R"(,"status":)" + toJson(state.status()).dump();
  out += ',';
  // The leases as the table shows them; their GPUs are in the GPU columns (`lease`).
  appendArray(out, "leases", leases, [&](const Lease& l) {
    out += R"({"id":)";
    appendString(out, l.id);
    out += R"(,"owner":)";
    appendString(out, l.owner);
    out += R"(,"job":)";
    appendString(out, l.job_name);
    out += R"(,"gpus":)" + std::to_string(l.gpus.size()) + R"(,"priority":)" + std::to_string(l.priority) +
           R"(,"created_ms":)" + std::to_string(toMillis(l.created)) + R"(,"expires_ms":)" +
           std::to_string(toMillis(l.expires));
    if (l.max_end) out += R"(,"max_end_ms":)" + std::to_string(toMillis(*l.max_end));
    if (l.idle_since) out += R"(,"idle_since_ms":)" + std::to_string(toMillis(*l.idle_since));
    if (l.preemptible) out += R"(,"preemptible":true)";
    if (l.no_reclaim) out += R"(,"no_reclaim":true)";
    if (l.elastic)
      out += R"(,"elastic":[)" + std::to_string(l.elastic->gpus) + "," + std::to_string(l.elastic->max_gpus) +
             "]";
    if (l.preempt_at) out += R"(,"preempt_at_ms":)" + std::to_string(toMillis(*l.preempt_at));
    if (l.reclaim_at) out += R"(,"reclaim_at_ms":)" + std::to_string(toMillis(*l.reclaim_at));
    if (!l.at_risk_nodes.empty()) {
      out += ',';
      appendArray(out, "at_risk_nodes", l.at_risk_nodes, [&](const std::string& n) { appendString(out, n); });
    }
    out += '}';
  });

  out += R"(,"nodes":{)";
  appendArray(out, "name", nodes, [&](const PoolNode* n) { appendString(out, n->name); });
  out += ',';
  appendArray(out, "switch", nodes, [&](const PoolNode* n) { appendString(out, n->switch_name); });
  out += ',';
  appendArray(out, "state", nodes, [&](const PoolNode* n) {
    out += '"';
    out += toString(n->state);
    out += '"';
  });
  out += ',';
  appendArray(out, "unreachable", nodes, [&](const PoolNode* n) { out += n->live.unreachable ? '1' : '0'; });
  out += ',';
  appendArray(out, "agent", nodes, [&](const PoolNode* n) { appendString(out, n->agent); });
  out += ',';
  appendArray(out, "heartbeat_age_s", nodes, [&](const PoolNode* n) {
    if (n->live.last_heartbeat == TimePoint{})
      out += "null";
    else
      out += std::to_string(std::max<int64_t>(
          0, std::chrono::duration_cast<std::chrono::seconds>(now - n->live.last_heartbeat).count()));
  });
  out += ',';
  appendArray(out, "first_gpu", firstGpu, [&](size_t i) { out += std::to_string(i); });
  out += R"(},"gpus":{"state":")";
  for (const GpuRow& g : gpus) out += gpuStateCode(g.state);
  out += "\",";
  appendArray(out, "lease", gpus, [&](const GpuRow& g) { out += std::to_string(g.lease); });
  auto reading = [&](const char* name, auto field, double scale) {
    out += ',';
    appendArray(out, name, gpus, [&](const GpuRow& g) {
      appendOptional(out, g.sample ? field(*g.sample) : std::nullopt, scale);
    });
  };
  auto mib = [](const std::optional<uint64_t>& bytes) {
    return bytes ? std::optional<double>(static_cast<double>(*bytes >> 20)) : std::nullopt;
  };
  reading(
      "util_pct", [](const topo::GpuSample& x) { return x.sm_utilization; }, 100);
  reading(
      "mem_used_mib", [&](const topo::GpuSample& x) { return mib(x.memory_used_bytes); }, 1);
  out += ',';
  appendArray(out, "mem_total_mib", gpus, [&](const GpuRow& g) {
    const topo::Gpu& t = g.node->topology->gpus[g.index];
    std::optional<uint64_t> total = g.sample ? g.sample->memory_total_bytes : std::nullopt;
    if (!total && t.memory_bytes) total = t.memory_bytes;
    appendOptional(out, mib(total), 1);
  });
  reading(
      "temp_c", [](const topo::GpuSample& x) { return x.temperature_c; }, 1);
  reading(
      "power_w", [](const topo::GpuSample& x) { return x.power_w; }, 1);
  // Notes are few: why a GPU failed (and when), or the processes that make it foreign.
  out += R"(},"notes":{)";
  bool first = true;
  for (size_t i = 0; i < gpus.size(); ++i) {
    const GpuRow& g = gpus[i];
    std::string note;
    if (g.state == GpuState::kFailed) {
      auto f = g.node->failures.find(g.index);
      note = f == g.node->failures.end() ? "marked failed"
                                         : (f->second.reason.empty() ? "marked failed" : f->second.reason) +
                                               " at " + common::rfc3339(f->second.time);
    } else if (g.state == GpuState::kForeign) {
      auto f = g.node->live.foreign.find(g.index);
      if (f != g.node->live.foreign.end()) note = foreignNote(f->second);
    }
    if (note.empty()) continue;
    if (!first) out += ',';
    first = false;
    out += '"' + std::to_string(i) + "\":";
    appendString(out, note);
  }
  out += "}}";
  return out;
}

std::string forViewer(const std::string& snapshot, const TokenEntry& who) {
  std::string you = R"({"you":{"owner":)";
  appendString(you, who.owner);
  you += R"(,"role":")";
  you += who.admin ? "admin" : who.node ? "node" : "user";
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
