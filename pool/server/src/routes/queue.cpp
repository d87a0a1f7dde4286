// /v1/queue...: the queue, a ticket's long poll, and a request withdrawn.

#include "poolrun/pool/json.hpp"
#include "poolrun/pool/service.hpp"
#include "routes.hpp"
#include "server_core.hpp"

namespace poolrun::pool {
namespace {

using nlohmann::json;

json queueList(ServerCore& m, Context&) {
  return m.read([](const PoolState& s) {
    json out = json::array();
    for (const QueueInfo& q : s.queueList()) out.push_back(toJson(q));
    return out;
  });
}

// Answers once the ticket is granted or failed, or its position is not `position` (the client's),
// or wait_ms is over.
json pollTicket(ServerCore& m, Context& c) {
  int64_t ticket = integerIn(c.params[0], "ticket", 1, INT64_MAX);
  int64_t waitMs = c.query("wait_ms", 0, 0, 3'600'000);
  int64_t known = c.query("position", -1, -1, INT32_MAX);
  const LongPolls::Slot slot(m.long_polls, c.who.owner);
  auto deadline = std::chrono::system_clock::now() + slot.wait(waitMs);
  return m.waitFor(deadline, [&](PoolState& s, TimePoint now, bool last) -> std::optional<json> {
    PoolService(c.who).requireTicketOwner(s, ticket, "poll the queue ticket");
    PollResult p = s.poll(ticket, now);
    if (p.status == QueueEntry::Status::kGranted)
      return json{{"status", "granted"}, {"lease", toJson(*p.lease)}};
    if (p.status == QueueEntry::Status::kFailed) return json{{"status", "failed"}, {"error", p.reason}};
    if (p.position != known || last) {
      json out = {{"status", "waiting"}, {"position", p.position}, {"reason", p.wait_reason}};
      out["planned_start_ms"] = p.planned_start ? json(toMillis(*p.planned_start)) : json(nullptr);
      return out;
    }
    return std::nullopt;
  });
}

json withdrawRequest(ServerCore& m, Context& c) {
  int64_t ticket = integerIn(c.params[0], "ticket", 1, INT64_MAX);
  return m.mutate([&](PoolState& s, TimePoint now) {
    PoolService(c.who).requireTicketOwner(s, ticket, "withdraw the request");
    const bool queued = s.queueMap().count(ticket) > 0;
    s.cancel(ticket, now);
    return json{{"ticket", ticket}, {"withdrawn", queued}};
  });
}

}  // namespace

std::vector<RouteSpec> queueRoutes() {
  return {
      {"GET", "/v1/queue", Role::kUser, StateLock::kRead, "", queueList},
      {"GET", "/v1/queue/*", Role::kUser, StateLock::kChange, "", pollTicket},
      {"DELETE", "/v1/queue/*", Role::kUser, StateLock::kChange, "", withdrawRequest},
  };
}

}  // namespace poolrun::pool
