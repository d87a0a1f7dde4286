// The dashboard's data: every GPU in columns (GET /v1/dashboard), and the history of the pool's use
// (GET /v1/history).

#include "routes.hpp"
#include "server_core.hpp"

namespace poolrun::pool {
namespace {

using nlohmann::json;

json dashboardData(ServerCore& m, Context& c) {
  std::lock_guard<std::mutex> lock(m.snapshot_mu);  // one build at a time, shared for half a second
  if (m.snapshot.empty() ||
      std::chrono::steady_clock::now() - m.snapshot_at > std::chrono::milliseconds(500)) {
    // The state's lock for the copy only; the JSON is written after it (DashboardData).
    m.snapshot = dashboardJson(m.pool->read(
        [&](const PoolState& s) { return captureDashboard(s, std::chrono::system_clock::now()); }));
    m.snapshot_at = std::chrono::steady_clock::now();
  }
  return json(forViewer(m.snapshot, c.who));
}

json historyData(ServerCore& m, Context&) {
  return json(m.history.json());
}

}  // namespace

std::vector<RouteSpec> dashboardRoutes() {
  return {
      {"GET", "/v1/dashboard", Role::kUser, "", dashboardData, "application/json"},
      {"GET", "/v1/history", Role::kUser, "", historyData, "application/json"},
  };
}

}  // namespace poolrun::pool
