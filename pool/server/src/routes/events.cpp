// GET /v1/events: the event log, read from a number on, as a long poll.

#include "routes.hpp"
#include "server_core.hpp"

namespace poolrun::pool {
namespace {

using nlohmann::json;

json eventPage(ServerCore& m, Context& c) {
  auto since = static_cast<uint64_t>(c.query("since", 0, 0, INT64_MAX));
  int64_t waitMs = c.query("wait_ms", 0, 0, 3'600'000);
  auto limit = static_cast<size_t>(c.query("limit", 1000, 1, 1000));
  const LongPolls::Slot slot(m.long_polls, c.who.owner);
  EventLog::Page page = m.events->read(since, limit, std::chrono::steady_clock::now() + slot.wait(waitMs));
  return json{{"events", std::move(page.events)}, {"last", page.last}, {"oldest", page.oldest}};
}

}  // namespace

std::vector<RouteSpec> eventRoutes() {
  return {{"GET", "/v1/events", Role::kUser, StateLock::kNone, "", eventPage}};
}

}  // namespace poolrun::pool
