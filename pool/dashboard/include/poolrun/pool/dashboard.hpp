#pragma once

// The web dashboard's side of poold (docs/dashboard.md): its files (pool/dashboard/ui/, built into the
// binary: nothing is read from disk, and no client-given path reaches the file system), the
// compact snapshot of every GPU that its grid draws, and the history of the pool's use it charts.

#include <chrono>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "poolrun/pool/state.hpp"

namespace poolrun::pool {

struct DashboardFile {
  std::string_view body;
  const char* content_type;
};

// The file for a request's path segments: [] ("/") is index.html, ["ui", NAME] one of pool/dashboard/ui/;
// nullopt for anything else (a "..", a sub-folder, an unknown name).
std::optional<DashboardFile> dashboardFile(const std::vector<std::string>& segments);

// The names /ui/ serves, for error messages ("app.js, index.html, style.css").
std::string dashboardFileNames();

// The headers every dashboard file is served with: a Content-Security-Policy that allows nothing
// but poold itself and no inline script or style, nosniff, no framing, no referrer, and
// Cache-Control no-cache (a browser never runs an older poold's files against a newer API).
std::vector<std::pair<std::string, std::string>> dashboardHeaders();

// What a snapshot shows, copied out of the state while its lock is held (captureDashboard); the
// JSON, 3.6 MB at 100,000 GPUs, is written from it after the lock is released (dashboardJson), so
// that a watching browser holds up acquires and heartbeats only for the copy.
struct DashboardData {
  int64_t time_ms = 0;
  PoolStatus status;
  struct LeaseRow {
    std::string id, owner, job;
    size_t gpus = 0;
    int priority = 0;
    TimePoint created, expires;
    std::optional<TimePoint> max_end, idle_since, preempt_at, reclaim_at;
    bool preemptible = false, no_reclaim = false;
    std::optional<std::pair<int, int>> elastic;  // its least and most GPUs
    std::vector<std::string> at_risk_nodes;
  };
  std::vector<LeaseRow> leases;
  struct NodeRow {
    std::string name, switch_name, agent;
    NodeState state = NodeState::kUp;
    bool unreachable = false;
    std::optional<int64_t> heartbeat_age_s;
    size_t first_gpu = 0;
  };
  std::vector<NodeRow> nodes;
  // Per GPU, in node order: its state's letter, its lease's place in `leases` (-1: none), and its
  // readings as shown (utilisation in percent, MiB, degrees, watts).
  std::string gpu_states;
  std::vector<int> gpu_lease;
  std::vector<std::optional<double>> util_pct, mem_used_mib, mem_total_mib, temp_c, power_w;
  std::vector<std::pair<size_t, std::string>> notes;  // GPU: why it failed, or who makes it foreign
};
DashboardData captureDashboard(const PoolState& state, TimePoint now);
std::string dashboardJson(const DashboardData& data);
// GET /v1/dashboard: the whole pool in columns (schema poolrun.dashboard/1, docs/dashboard.md),
// about 34 bytes per GPU instead of the 260 of /v1/nodes: dashboardJson(captureDashboard(...)).
// O(GPUs); poold shares one snapshot among the requests of half a second.
std::string dashboardSnapshot(const PoolState& state, TimePoint now);

// The snapshot with "you": {"owner", "role"} of the token that asked, for the page.
std::string forViewer(const std::string& snapshot, const Caller& who);

// One sample of the pool's use, for the history charts.
struct HistorySample {
  int64_t time_ms = 0;
  int gpus = 0, leased = 0, failed = 0, unreachable = 0;
  std::optional<double> utilization;  // mean SM utilisation of the GPUs with a reading (0 to 1)
  int queued = 0;
  double wait_mean_s = 0, wait_max_s = 0;  // how long the queued requests have waited
};

HistorySample historySample(const PoolState& state, TimePoint now);

// The last `capacity` samples, one taken every `interval` (PoolServer's ticker asks `due`; poold's
// defaults are ServerOptions'). Thread-safe.
class PoolHistory {
 public:
  PoolHistory(std::chrono::seconds interval, size_t capacity);
  bool due(TimePoint now) const;
  void add(const HistorySample& sample);
  // GET /v1/history: {"interval_s", "capacity", "samples": [[time_ms, gpus, leased, failed,
  // unreachable, utilization|null, queued, wait_mean_s, wait_max_s], ...]}, oldest first.
  std::string json() const;

 private:
  std::chrono::seconds interval_;
  size_t capacity_;
  mutable std::mutex mu_;
  std::deque<HistorySample> samples_;
  std::optional<TimePoint> last_;
};

}  // namespace poolrun::pool
