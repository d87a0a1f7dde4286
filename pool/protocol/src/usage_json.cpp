#include "poolrun/pool/usage_json.hpp"

#include <cmath>

#include "poolrun/common/error.hpp"
#include "poolrun/common/names.hpp"
#include "poolrun/pool/json_read.hpp"

namespace poolrun::pool {

using nlohmann::json;

namespace {

int64_t millisOf(TimePoint t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}
TimePoint timeOf(int64_t ms) {
  return TimePoint(std::chrono::milliseconds(ms));
}

[[noreturn]] void bad(const std::string& what) {
  throw Error(ErrorCode::kBadInput, "usage row: " + what);
}

double figure(const json& doc, const char* key) {
  auto it = doc.find(key);
  if (it == doc.end() || !it->is_number()) bad(std::string("field '") + key + "' is missing or not a number");
  return it->get<double>();
}

std::string textOf(const json& doc, const char* key) {
  auto it = doc.find(key);
  if (it == doc.end()) return "";
  if (!it->is_string()) bad(std::string("field '") + key + "' is not a string");
  return it->get<std::string>();
}

int64_t millis(const json& doc, const char* key) {
  auto it = doc.find(key);
  if (it == doc.end() || !it->is_number_integer())
    bad(std::string("field '") + key + "' is missing or not a whole number of milliseconds");
  const int64_t ms = it->get<int64_t>();
  if (ms < 0 || ms > json_read::kTimeMillisRange.max)
    bad(std::string("field '") + key + "' is " + std::to_string(ms) + " (a time from 1970 to 2262)");
  return ms;
}

}  // namespace

json toJson(const UsageRecord& r) {
  return {{"id", r.id},
          {"kind", toString(r.kind)},
          {"lease", r.lease},
          {"job", r.job},
          {"owner", r.owner},
          {"account", r.account},
          {"node", r.node},
          {"model", r.model},
          {"start_ms", millisOf(r.start)},
          {"end_ms", millisOf(r.end)},
          {"running", r.running},
          {"gpus", r.gpus},
          {"allocated_s", r.allocated_s},
          {"used_s", r.used_s},
          {"idle_s", r.idle_s},
          {"energy_j", r.energy_j},
          {"ended", r.ended}};
}

void checkUsageRecord(const UsageRecord& r) {
  // A figure is 0 or more and at most kMaxFigure (a million GPUs for a century is 3.2e15 GPU-s): past
  // that it is not the pool's, and it would overflow on the way to infinity.
  constexpr double kMaxFigure = 1e18;
  if (r.id == 0) bad("id 0 (ids start at 1)");
  const std::string which = "row " + std::to_string(r.id);
  for (auto [name, v] : {std::pair{"gpus", r.gpus},
                         {"allocated_s", r.allocated_s},
                         {"used_s", r.used_s},
                         {"idle_s", r.idle_s},
                         {"energy_j", r.energy_j}})
    if (!std::isfinite(v) || v < 0 || v > kMaxFigure)
      bad(which + ": '" + name + "' is " + std::to_string(v) + " (a figure is 0 to 1e18)");
  if (r.gpus > 1e6)
    bad(which + ": 'gpus' is " + std::to_string(r.gpus) + " (a node holds at most 1,000,000)");
  if (r.end < r.start) bad(which + ": it ends before it starts");
  if (r.kind == UsageRecord::Kind::kDay && r.end - r.start != std::chrono::hours(24))
    bad(which + ": a day's row does not span one day");
  if (r.kind == UsageRecord::Kind::kLease && r.lease.empty()) bad(which + ": a lease row without its lease");
  if (r.kind != UsageRecord::Kind::kLease && r.running) bad(which + ": only a lease row runs");
  if (r.owner.empty()) bad(which + ": no owner");
}

UsageRecord usageRecordFromJson(const json& doc) {
  if (!doc.is_object()) bad("not an object");
  UsageRecord r;
  auto id = doc.find("id");
  if (id == doc.end() || !id->is_number_unsigned())
    bad("field 'id' is missing or not a positive whole number");
  r.id = id->get<uint64_t>();
  const std::string kind = textOf(doc, "kind");
  auto k = usageKindOf(kind);
  if (!k)
    bad("row " + std::to_string(r.id) + ": kind '" + common::printable(kind) + "' (lease, day or total)");
  r.kind = *k;
  r.lease = textOf(doc, "lease");
  r.job = textOf(doc, "job");
  r.owner = textOf(doc, "owner");
  r.account = textOf(doc, "account");
  r.node = textOf(doc, "node");
  r.model = textOf(doc, "model");
  r.start = timeOf(millis(doc, "start_ms"));
  r.end = timeOf(millis(doc, "end_ms"));
  auto running = doc.find("running");
  r.running = running != doc.end() && running->is_boolean() && running->get<bool>();
  r.gpus = figure(doc, "gpus");
  r.allocated_s = figure(doc, "allocated_s");
  r.used_s = figure(doc, "used_s");
  r.idle_s = figure(doc, "idle_s");
  r.energy_j = figure(doc, "energy_j");
  r.ended = textOf(doc, "ended");
  checkUsageRecord(r);
  return r;
}

json toJson(const UsageTotals& t) {
  return {{"name", t.name},     {"allocated_s", t.allocated_s}, {"used_s", t.used_s},
          {"idle_s", t.idle_s}, {"energy_j", t.energy_j},       {"leases", t.leases}};
}

UsageTotals usageTotalsFromJson(const json& doc) {
  if (!doc.is_object()) throw Error(ErrorCode::kBadInput, "usage report: a row is not an object");
  UsageTotals t;
  t.name = textOf(doc, "name");
  t.allocated_s = figure(doc, "allocated_s");
  t.used_s = figure(doc, "used_s");
  t.idle_s = figure(doc, "idle_s");
  t.energy_j = figure(doc, "energy_j");
  auto leases = doc.find("leases");
  if (leases == doc.end() || !leases->is_number_unsigned())
    throw Error(ErrorCode::kBadInput, "usage report: field 'leases' is missing or not a count");
  t.leases = leases->get<size_t>();
  return t;
}

json toJson(const FairShareRow& row) {
  json doc = {{"account", row.account},
              {"depth", row.depth},
              {"raw_shares", row.raw_shares},
              {"norm_shares", row.norm_shares},
              {"raw_usage", row.raw_usage},
              {"norm_usage", row.norm_usage},
              {"effective_usage", row.effective_usage},
              {"factor", row.factor}};
  if (!row.user.empty()) doc["user"] = row.user;
  return doc;
}

FairShareRow fairShareRowFromJson(const json& doc) {
  JsonFields f = fieldsOf(doc);
  FairShareRow r;
  r.account = text(f, "account", 0, Text::kStored);
  r.user = textOr(f, "user", 0, Text::kStored);
  r.depth = integer(f, "depth", Range<int>{0, INT32_MAX});
  r.raw_shares = integer(f, "raw_shares", Range<int>{0, Accounts::kMaxShares});
  r.norm_shares = f.number("norm_shares", 0, 1);
  r.raw_usage = f.number("raw_usage", 0, 1e30);
  r.norm_usage = f.number("norm_usage", 0, 1);
  r.effective_usage = f.number("effective_usage", 0, 1e30);
  r.factor = f.number("factor", 0, 1);
  return r;
}

json toJson(const FairShareReport& report) {
  json rows = json::array();
  for (const FairShareRow& r : report.rows) rows.push_back(toJson(r));
  const PriorityWeights& w = report.weights;
  return json{{"accounts", report.accounts},
              {"half_life_s", report.half_life.count()},
              {"default_account", report.default_account},
              {"weights",
               {{"priority", w.priority},
                {"fairshare", w.fairshare},
                {"age", w.age},
                {"size", w.size},
                {"max_age_s", w.max_age.count()}}},
              {"rows", std::move(rows)}};
}

FairShareReport fairShareReportFromJson(const json& doc) {
  JsonFields f = fieldsOf(doc);
  FairShareReport r;
  r.accounts = f.boolean("accounts", false);
  r.half_life = std::chrono::seconds(integer(f, "half_life_s", Range<int64_t>{0, INT64_MAX}));
  r.default_account = textOr(f, "default_account", 0, Text::kStored);
  JsonFields w = f.child(f.need("weights"), "weights");
  constexpr double kMax = 1e12;
  r.weights.priority = w.number("priority", 0, kMax);
  r.weights.fairshare = w.number("fairshare", 0, kMax);
  r.weights.age = w.number("age", 0, kMax);
  r.weights.size = w.number("size", 0, kMax);
  r.weights.max_age = std::chrono::seconds(integer(w, "max_age_s", Range<int64_t>{1, INT64_MAX}));
  const json& rows = f.array("rows");
  for (size_t i = 0; i < rows.size(); ++i) r.rows.push_back(fairShareRowFromJson(rows[i]));
  return r;
}

}  // namespace poolrun::pool
