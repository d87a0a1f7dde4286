// /v1/reservations (docs/reservations.md): the pool's reservations, listed for anyone, made and
// removed by an administrator; each change an event of the audit trail.

#include "poolrun/common/names.hpp"
#include "poolrun/pool/json.hpp"
#include "poolrun/pool/json_read.hpp"
#include "poolrun/topo/hostlist.hpp"
#include "routes.hpp"
#include "server_core.hpp"

namespace poolrun::pool {
namespace {

using nlohmann::json;
using namespace json_read;

json reservationList(ServerCore& m, Context&) {
  return m.read([](const PoolState& s) {
    json out = json::array();
    for (const auto& [name, r] : s.reservations()) out.push_back(toJson(r));
    return out;
  });
}

std::vector<std::string> namesOf(const JsonFields& f, const char* key) {
  std::vector<std::string> out;
  if (!f.has(key)) return out;
  const json& list = f.array(key);
  if (list.size() > kMaxReservedUsers)
    f.failField(
        key, "at most " + std::to_string(kMaxReservedUsers) + " names, not " + std::to_string(list.size()));
  for (size_t i = 0; i < list.size(); ++i) {
    if (!list[i].is_string()) f.failField(key, "expected a list of names, not " + common::shownJson(list[i]));
    out.push_back(list[i].get<std::string>());
    common::checkText(out.back(), common::kMaxOwnerBytes, "field '" + f.element(key, i) + "'");
  }
  return out;
}

// {"name", "nodes": "n[01-04]", "start_ms" (default now), "duration_s", "users": [...],
// "accounts": [...]}
json createReservation(ServerCore& m, Context& c) {
  const json body = parseBody(c.req.body);  // the fields refer to it
  JsonFields f =
      clientFields(body, {"name", "nodes", "start_ms", "duration_s", "users", "accounts"}, "the reservation");
  Reservation r;
  r.name = text(f, "name", 64, Text::kClient);
  const std::string hosts = text(f, "nodes", 1 << 20, Text::kClient);
  try {
    r.nodes = topo::expandHostlist(hosts, kMaxReservedNodes);
  } catch (const Error& e) {
    throw badInput("field 'nodes': " + std::string(e.what()));
  }
  const int64_t startMs = f.has("start_ms") ? integer(f, "start_ms", json_read::kTimeMillisRange) : -1;
  const int64_t duration = integer(f, "duration_s", Range<int64_t>{1, kMaxReservationLength.count()});
  if (startMs > json_read::kTimeMillisRange.max - duration * 1000)
    throw badInput("field 'start_ms': " + std::to_string(startMs) + " with duration_s " +
                   std::to_string(duration) + " ends past what the pool's clock holds (2262)");
  r.users = namesOf(f, "users");
  r.accounts = namesOf(f, "accounts");
  r.created_by = c.who.owner;
  return m.mutate([&](PoolState& s, TimePoint now) {
    r.start = startMs < 0 ? now : TimePoint(std::chrono::milliseconds(startMs));
    r.end = r.start + std::chrono::seconds(duration);
    const std::string name = r.name;
    s.reserve(std::move(r), now);
    const Reservation& made = s.reservations().at(name);
    json fields = {{"name", name},
                   {"nodes", made.nodes.size()},
                   {"start_ms", toMillis(made.start)},
                   {"end_ms", toMillis(made.end)}};
    fields.update(auditOf(c));
    m.events->record("reservation_created", fields, now);
    s.tick(now, m.opt.stale_after);
    return toJson(made);
  });
}

json removeReservation(ServerCore& m, Context& c) {
  takesNoFields(c.req.body);
  const std::string name = c.params[0];
  return m.mutate([&](PoolState& s, TimePoint now) {
    s.unreserve(name);
    json fields = {{"name", name}};
    fields.update(auditOf(c));
    m.events->record("reservation_removed", fields, now);
    s.tick(now, m.opt.stale_after);
    return json{{"name", name}, {"removed", true}};
  });
}

}  // namespace

std::vector<RouteSpec> reservationRoutes() {
  return {
      {"GET", "/v1/reservations", Role::kUser, StateLock::kRead, "", reservationList},
      {"POST", "/v1/reservations", Role::kAdmin, StateLock::kChange, "make reservations", createReservation},
      {"DELETE", "/v1/reservations/*", Role::kAdmin, StateLock::kChange, "remove reservations",
       removeReservation},
  };
}

}  // namespace poolrun::pool
