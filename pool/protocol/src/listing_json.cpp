// Listings as JSON (json.hpp): a waiting request as GET /v1/queue lists it (with its account and
// multi-factor priority), and a reservation as GET /v1/reservations lists it and the stores keep it.

#include <algorithm>

#include "poolrun/common/names.hpp"
#include "poolrun/pool/json.hpp"
#include "poolrun/pool/json_read.hpp"

namespace poolrun::pool {

using nlohmann::json;
using namespace json_read;

json toJson(const QueueInfo& q) {
  json doc = {{"ticket", q.ticket},
              {"position", q.position},
              {"owner", q.owner},
              {"job_name", q.job_name},
              {"gpus", q.gpus},
              {"priority", q.priority},
              {"enqueued_ms", toMillis(q.enqueued)},
              {"reason", q.reason},
              {"planned_start_ms", q.planned_start ? json(toMillis(*q.planned_start)) : json(nullptr)}};
  if (!q.account.empty()) doc["account"] = q.account;
  if (q.factors)
    doc["factors"] = {{"priority", q.factors->priority},
                      {"fairshare", q.factors->fairshare},
                      {"age", q.factors->age},
                      {"size", q.factors->size},
                      {"score", q.factors->score}};
  return doc;
}

QueueInfo queueInfoFromJson(const json& doc) {
  JsonFields f = fieldsOf(doc);
  QueueInfo q;
  q.ticket = integer(f, "ticket", Range<int64_t>{0, INT64_MAX});
  q.position = integer(f, "position", Range<int>{0, INT32_MAX});
  q.owner = textOr(f, "owner", 0, Text::kStored);
  q.account = textOr(f, "account", 0, Text::kStored);
  q.job_name = textOr(f, "job_name", 0, Text::kStored);
  q.gpus = integer(f, "gpus", kGpusRange);
  if (f.has("factors")) {
    JsonFields x = f.child(f.need("factors"), "factors");
    constexpr double kMax = 1e300;
    q.factors = PriorityFactors{.priority = x.number("priority", -kMax, kMax),
                                .fairshare = x.number("fairshare", 0, 1),
                                .age = x.number("age", 0, 1),
                                .size = x.number("size", 0, 1),
                                .score = x.number("score", -kMax, kMax)};
  }
  q.priority = integerOr(f, "priority", kPriorityRange, 0);
  q.enqueued = timeField(f, "enqueued_ms");
  q.reason = textOr(f, "reason", 0, Text::kStored);
  if (f.has("planned_start_ms")) q.planned_start = timeField(f, "planned_start_ms");
  return q;
}

json toJson(const Reservation& r) {
  return {{"name", r.name},
          {"nodes", r.nodes},
          {"start_ms", toMillis(r.start)},
          {"end_ms", toMillis(r.end)},
          {"users", r.users},
          {"accounts", r.accounts},
          {"created_by", r.created_by},
          {"created_ms", toMillis(r.created)},
          {"drained", r.drained}};
}

Reservation reservationFromJson(const json& doc) {
  JsonFields f = fieldsOf(doc);
  Reservation r;
  r.name = text(f, "name", 64, Text::kStored);
  auto names = [&](const char* key, bool nodes) {
    std::vector<std::string> out;
    const json& list = f.array(key);
    for (size_t i = 0; i < list.size(); ++i) {
      if (!list[i].is_string())
        f.failField(key, "expected a list of names, not " + common::shownJson(list[i]));
      const std::string& name = list[i].get_ref<const std::string&>();
      if (nodes) common::checkNodeName(name, "field '" + f.element(key, i) + "'");
      out.push_back(name);
    }
    return out;
  };
  r.nodes = names("nodes", true);
  std::sort(r.nodes.begin(), r.nodes.end());
  r.start = timeField(f, "start_ms");
  r.end = timeField(f, "end_ms");
  r.users = names("users", false);
  r.accounts = names("accounts", false);
  r.created_by = textOr(f, "created_by", 0, Text::kStored);
  r.created = timeField(f, "created_ms");
  r.drained = f.boolean("drained", false);
  return r;
}

}  // namespace poolrun::pool
