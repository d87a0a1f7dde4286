#include "poolrun/pool/dashboard_routes.hpp"

#include <memory>
#include <mutex>

#include <nlohmann/json.hpp>

#include "poolrun/common/names.hpp"
#include "poolrun/pool/dashboard.hpp"

namespace poolrun::pool {
namespace {

using Steady = std::chrono::steady_clock;

// GET / and /ui/NAME: the dashboard's files, built into poold; no token (they hold no data: the
// page asks for one). Nothing is read from disk, so no path a client sends reaches a file.
HttpReply fileReply(const HttpRequest& req) {
  std::optional<DashboardFile> file = dashboardFile(req.segments);
  if (!file) {
    std::string path;
    for (const std::string& s : req.segments) path += "/" + s;
    if (path.size() > 120) path = path.substr(0, 120) + "...";
    return refusal("not_found", "no dashboard file '" + common::printable(path) + "': poold serves " +
                                    dashboardFileNames() + " under /ui/; open / for the dashboard");
  }
  if (req.method != "GET")
    return refusal("method_not_allowed", "method " + common::printable(req.method) +
                                             " is not allowed on the dashboard's files (GET them)");
  HttpReply reply{200, std::string(file->body), file->content_type};
  reply.headers = dashboardHeaders();
  return reply;
}

// What the dashboard's routes share: the history, and the last snapshot.
struct Dashboard {
  Dashboard(std::chrono::seconds interval, size_t samples)
      : history(interval, std::max<size_t>(1, samples)) {}
  PoolHistory history;
  std::mutex snapshot_mu;  // one build at a time, shared for half a second
  std::string snapshot;
  Steady::time_point snapshot_at;

  HttpReply data(const Caller& who, const StateReader& read) {
    std::lock_guard<std::mutex> lock(snapshot_mu);
    if (snapshot.empty() || Steady::now() - snapshot_at > std::chrono::milliseconds(500)) {
      // The state's lock for the copy only; the JSON is written after it (DashboardData).
      DashboardData captured;
      read([&captured](const PoolState& s) {
        captured = captureDashboard(s, std::chrono::system_clock::now());
      });
      snapshot = dashboardJson(captured);
      snapshot_at = Steady::now();
    }
    return {200, forViewer(snapshot, who), "application/json"};
  }

  void sample(const StateReader& read) {
    const TimePoint now = std::chrono::system_clock::now();
    if (!history.due(now)) return;
    HistorySample taken;
    read([&taken, now](const PoolState& s) { taken = historySample(s, now); });
    history.add(taken);
  }
};

}  // namespace

void addDashboard(ServerOptions& options) {
  auto d = std::make_shared<Dashboard>(options.history_interval, options.history_samples);
  auto files = [](const HttpRequest& req, const Caller&, const StateReader&) { return fileReply(req); };
  options.routes.push_back({"*", "/", false, "/ui", files, StateLock::kNone});
  options.routes.push_back({"*", "/ui/**", false, "/ui", files, StateLock::kNone});
  options.routes.push_back(
      {"GET", "/v1/dashboard", true, "",
       [d](const HttpRequest&, const Caller& who, const StateReader& read) { return d->data(who, read); }});
  options.routes.push_back({"GET", "/v1/history", true, "",
                            [d](const HttpRequest&, const Caller&, const StateReader&) {
                              return HttpReply{200, d->history.json(), "application/json"};
                            },
                            StateLock::kNone});
  options.on_tick.push_back([d](const StateReader& read) { d->sample(read); });
}

}  // namespace poolrun::pool
