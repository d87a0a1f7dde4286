// GET /healthz, /v1/status, /v1/quotas, /v1/replicas and /metrics: what the pool and poold are.

#include <sstream>

#include "poolrun/pool/json.hpp"
#include "poolrun/pool/live_metrics.hpp"
#include "routes.hpp"
#include "server_core.hpp"

namespace poolrun::pool {
namespace {

using nlohmann::json;

json poolStatus(ServerCore& m, Context&) {
  return m.read([](const PoolState& s) { return toJson(s.status()); });
}

json quotaList(ServerCore& m, Context&) {
  return m.read([](const PoolState& s) {
    json out = json::array();
    for (const QuotaUse& q : s.quotaUse()) out.push_back(toJson(q));
    return out;
  });
}

json replicaList(ServerCore& m, Context&) {
  if (!m.opt.replicas)
    throw HttpError("not_found", "this poold keeps the pool in one SQLite file: it has no replicas");
  return json::parse(m.opt.replicas());
}

json prometheusText(ServerCore& m, Context&) {
  PoolStatus s;
  std::map<std::string, int64_t> gpuMillis;
  std::string usage;
  std::ostringstream live;
  m.read([&](const PoolState& st) {
    s = st.status();
    const auto owners = st.usage().totalsByOwner(std::chrono::system_clock::now());
    std::map<std::string, double, std::less<>> allocated;
    for (const auto& [owner, t] : owners) allocated[owner] = t.allocated_s;
    gpuMillis = m.metrics.gpuMillis(allocated);
    usage = m.metrics.renderUsage(owners);
    writeLiveMetrics(live, st, std::chrono::system_clock::now());
    return 0;
  });
  return json(m.metrics.render(s, m.http ? m.http->stats() : HttpServerStats{}, gpuMillis) + usage +
              live.str() + (m.opt.more_metrics ? m.opt.more_metrics() : std::string()));  // unbound: tests
}

}  // namespace

std::vector<RouteSpec> statusRoutes() {
  return {
      {"GET", "/healthz", Role::kAnyone, StateLock::kRead, "", nullptr, nullptr, nullptr,
       [](ServerCore& m, Context&) { return m.health(); }},
      {"GET", "/v1/status", Role::kUser, StateLock::kRead, "", poolStatus},
      {"GET", "/v1/quotas", Role::kUser, StateLock::kRead, "", quotaList},
      {"GET", "/v1/replicas", Role::kUser, StateLock::kNone, "", replicaList},
      {"GET", "/metrics", Role::kUser, StateLock::kRead, "", prometheusText, "text/plain; version=0.0.4"},
  };
}

}  // namespace poolrun::pool
